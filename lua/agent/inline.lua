--- Inline edits (`:'<,'>Agent edit {instruction}`, <Plug>(agent-edit), require("agent").edit()):
--- the model's change to some lines of a buffer, proposed in that buffer hunk by hunk.
---
--- One edit per buffer at a time. While the model writes, the lines asked about carry a spinner
--- and what it is doing (`<C-c>` or `:Agent stop` stops it). A proposal shows each hunk where it
--- goes: the lines it removes highlighted in place, the lines it adds as virtual lines below
--- them, a sign on each and a hint on the one the cursor is at. The buffer-local keys
--- (`keymaps.inline`, listed by `?`) keep or drop a hunk, all of them, or move between them;
--- when none is left undecided, the kept ones are applied to the buffer as one undo step (the
--- file is written only when the person saves) and the backend tells the model what became of
--- each. A hunk whose lines the person changed meanwhile is stale: shown so, never applied.
---
--- The backend asks for the buffer's text (`text`, with a stamp: its changedtick) when the
--- model's edit arrives, and the proposal comes back with that stamp: the text of that version
--- is kept here, so a proposal computed before the person typed lands on the lines they moved.

local M = {}
local H = {}

H.ns = vim.api.nvim_create_namespace("agent.inline")

--- The running edits, by their number.
---@type table<integer, agent.Inline>
H.edits = {}
--- Which edit each buffer has.
---@type table<integer, integer>
H.of_buffer = {}
H.next = 0

---@class agent.Inline
---@field id integer
---@field buf integer
---@field conversation integer
---@field what string `lines 3-9 of a.py`, for messages
---@field range integer extmark: where the spinner shows
---@field status string what the edit is doing now
---@field frame integer
---@field timer? uv.uv_timer_t
---@field snapshots table<integer, string[]> the texts handed to the backend, by stamp
---@field proposal? agent.InlineProposal
---@field saved_maps table[] the person's buffer-local maps the edit's keys cover
---@field mapped string[] the lhs of the edit's keys in this buffer
---@field attached boolean

---@class agent.InlineProposal
---@field question integer
---@field hunks agent.InlineHunk[]
---@field current integer

---@class agent.InlineHunk
---@field removed string[]
---@field added string[]
---@field shown string[]
---@field state "pending"|"kept"|"dropped"|"stale"
---@field mark integer extmark over the removed lines, or at the line an insertion goes before
---@field after_last boolean an insertion at the end of the buffer (after the mark's line)
---@field view? integer extmark holding the virtual lines, the sign and the hint

--- The most of the buffer's text an edit sends (as the ask's and read_file's clamp).
M.CONTEXT_CHARS = 20000

M.SPINNER = { "⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏" }

--- The node kinds the edit mapping takes whole in Normal mode (the innermost one around the
--- cursor), matched against the treesitter node's type.
H.NODE_KINDS = { "function", "method", "class", "struct", "impl", "interface", "enum", "trait", "module" }

--- Starts an inline edit of the current buffer (see the module's doc). `opts.first`/`opts.last`
--- (1-based lines) give the range; else the Visual selection; else the treesitter node around
--- the cursor (a function, a class...), else the cursor's line. Without `opts.instruction`, asks
--- for one. Runs acting for the conversation it is started from. `deps` are what it needs of
--- the modules that show events to it (given by the public API, so neither requires the other):
--- `ensure` starts the backend, `buffer_path` names a buffer's file, `spent` counts what the
--- edit cost in its conversation's cost.
---@param opts? { instruction?: string, first?: integer, last?: integer }
---@param deps { ensure: fun(): boolean, buffer_path: fun(buf: integer): string?, spent?: fun(cost: number) }
---@return boolean started false when nothing was sent (the reason was shown, or it was asked for)
function M.edit(opts, deps)
  opts = opts or {}
  local buf = vim.api.nvim_get_current_buf()
  if H.of_buffer[buf] then
    vim.notify(
      "agent: an edit of this buffer is still open: keep or drop its hunks (? lists the keys), or stop it with :Agent stop",
      vim.log.levels.WARN
    )
    return false
  end
  if not vim.bo[buf].modifiable then
    vim.notify(
      "agent: this buffer is not modifiable, so no edit could be applied; :set modifiable first",
      vim.log.levels.ERROR
    )
    return false
  end
  local path = deps.buffer_path(buf)
  if not path then
    vim.notify("agent: :Agent edit works on a file's buffer, and this one holds no file", vim.log.levels.ERROR)
    return false
  end
  local first, last = H.range(buf, opts)
  local what = first == last and ("line %d of %s"):format(first, path)
    or ("lines %d-%d of %s"):format(first, last, path)
  local instruction = opts.instruction and vim.trim(opts.instruction) or ""
  if instruction == "" then
    local conversation = require("agent.conversations").active().id
    require("agent.text").ask_for(("agent: edit %s: "):format(what), function(text)
      require("agent.conversations").acting(conversation, function()
        vim.api.nvim_buf_call(buf, function()
          M.edit({ instruction = text, first = first, last = last }, deps)
        end)
      end)
    end)
    return false
  end
  if not deps.ensure() then
    return false
  end
  H.next = H.next + 1
  local id = H.next
  local edit = {
    id = id,
    buf = buf,
    conversation = require("agent.conversations").active().id,
    -- Counts what it cost in its conversation's cost.
    spent = deps.spent,
    what = what,
    range = vim.api.nvim_buf_set_extmark(buf, H.ns, first - 1, 0, {}),
    status = "writing",
    frame = 1,
    snapshots = {},
    saved_maps = {},
    mapped = {},
    attached = false,
  }
  H.edits[id] = edit
  H.of_buffer[buf] = id
  H.map(edit, { stop = true })
  H.spin(edit)
  local options = require("agent.config").options.inline
  local sent = require("agent.rpc.wire").notify(require("agent.rpc.wire").method.INLINE, {
    conversation = edit.conversation,
    inline = id,
    path = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(buf), ":p"),
    first = first,
    last = last,
    instruction = instruction,
    excerpt = H.excerpt(buf, first, last, options.context_lines),
    filetype = vim.bo[buf].filetype,
    diagnostics = H.diagnostics(buf, first, last),
    provider = options.provider,
    model = options.model,
  })
  if not sent then
    H.finish(edit) -- the wire said why
    return false
  end
  return true
end

--- Ends every edit without a word from the backend: it exited (rpc/job.lua), so none of them
--- will hear more. Nothing open is applied.
function M.backend_gone()
  for _, edit in pairs(H.edits) do
    H.finish(edit)
  end
end

--- The backend's query (protocol.rs `lua::INLINE_TEXT`): the text of edit `id`'s buffer now and
--- its stamp; nil when the edit or its buffer is gone.
---@param id integer
---@return { text: string, stamp: integer }?
function M.text(id)
  local edit = H.edits[id]
  if not edit or not vim.api.nvim_buf_is_loaded(edit.buf) then
    return nil
  end
  local lines = vim.api.nvim_buf_get_lines(edit.buf, 0, -1, false)
  local stamp = vim.api.nvim_buf_get_changedtick(edit.buf)
  -- Only the newest few are ever asked about.
  edit.snapshots = { [stamp] = lines }
  return { text = table.concat(lines, "\n") .. "\n", stamp = stamp }
end

--- An `inline_*` event from the backend (rpc/init.lua hands them here).
---@param event table
function M.on_event(event)
  local edit = H.edits[event.inline]
  if event.type == "inline_proposal" then
    if not edit or not vim.api.nvim_buf_is_loaded(edit.buf) then
      -- Nobody can look at it: nothing is applied, and the model is told.
      H.answer(
        event.question,
        vim.tbl_map(function()
          return "stale"
        end, event.hunks or {})
      )
      return
    end
    H.propose(edit, event)
  elseif not edit then
    return
  elseif event.type == "inline_status" then
    edit.status = tostring(event.text)
    H.draw_spinner(edit)
  elseif event.type == "inline_done" then
    H.finish(edit)
    if edit.spent and tonumber(event.cost) then
      edit.spent(tonumber(event.cost))
    end
    local level = event.ok and vim.log.levels.INFO or vim.log.levels.WARN
    vim.notify(H.one_line(tostring(event.message)), level)
  end
end

--- `message`'s first line, cut to the room the message area has: a long answer must not stop
--- the screen at a hit-enter prompt that takes the person's next key.
function H.one_line(message)
  local line = message:match("^[^\n]*")
  local room = math.max(20, vim.v.echospace - 1)
  if vim.fn.strdisplaywidth(line) > room then
    line = vim.fn.strcharpart(line, 0, room - 1) .. "…"
  end
  return line
end

--- Stops the inline edit of buffer `buf` (default: the current one), or when it has none and
--- `all_of` is a conversation's number, every edit of that conversation. True when one was.
---@param buf? integer
---@param all_of? integer
---@return boolean
function M.stop(buf, all_of)
  buf = buf or vim.api.nvim_get_current_buf()
  local mine = H.of_buffer[buf] and { H.edits[H.of_buffer[buf]] } or {}
  if #mine == 0 and all_of then
    for _, edit in pairs(H.edits) do
      if edit.conversation == all_of then
        mine[#mine + 1] = edit
      end
    end
  end
  for _, edit in ipairs(mine) do
    H.stop(edit)
  end
  return #mine > 0
end

--- How many inline edits run (for tests, and the statusline).
---@return integer
function M.running()
  return vim.tbl_count(H.edits)
end

--- The open proposal of buffer `buf` (default: the current one), for tests and the help: its
--- hunks' states and the one the keys are at; nil when there is none.
---@param buf? integer
---@return { states: string[], current: integer }?
function M.proposal(buf)
  local id = H.of_buffer[buf or vim.api.nvim_get_current_buf()]
  local edit = id and H.edits[id]
  if not edit or not edit.proposal then
    return nil
  end
  local states = {}
  for i, hunk in ipairs(edit.proposal.hunks) do
    states[i] = hunk.state
  end
  return { states = states, current = edit.proposal.current }
end

--- The keys of a proposal (`keymaps.inline`), for the buffer-local maps: the action and what
--- its `desc` says.
H.ACTIONS = {
  { "keep", "keep this hunk" },
  { "drop", "drop this hunk" },
  { "keep_all", "keep every hunk left" },
  { "drop_all", "drop every hunk left" },
  { "next", "next hunk" },
  { "prev", "previous hunk" },
  { "help", "list these keys" },
  { "stop", "stop the edit (nothing more is applied)" },
}

-- The range --------------------------------------------------------------------------------

--- The lines an edit is about: the options', the Visual selection's, the treesitter node's
--- around the cursor, or the cursor's line.
function H.range(buf, opts)
  if opts.first then
    local last = opts.last or opts.first
    return math.min(opts.first, last), math.max(opts.first, last)
  end
  local mode = vim.fn.mode()
  if mode == "v" or mode == "V" or mode == "\22" then
    local first, last = vim.fn.line("v"), vim.fn.line(".")
    vim.cmd("normal! \27")
    return math.min(first, last), math.max(first, last)
  end
  local line = vim.fn.line(".")
  local ok, node = pcall(vim.treesitter.get_node, { bufnr = buf })
  while ok and node do
    local kind = node:type()
    for _, wanted in ipairs(H.NODE_KINDS) do
      if kind:find(wanted, 1, true) then
        local start_row, _, end_row, end_col = node:range()
        local last = end_col == 0 and end_row or end_row + 1
        return start_row + 1, math.max(start_row + 1, last)
      end
    end
    node = node:parent()
  end
  return line, line
end

--- Lines `first`..`last` and `around` lines each side, each as `12: text`, within
--- M.CONTEXT_CHARS: the asked lines first, then the lines around them, nearest first, one
--- above and one below in turn, while the budget lasts (as an ask takes them).
function H.excerpt(buf, first, last, around)
  local count = vim.api.nvim_buf_line_count(buf)
  local order = {}
  for n = first, last do
    order[#order + 1] = n
  end
  for d = 1, around do
    if first - d >= 1 then
      order[#order + 1] = first - d
    end
    if last + d <= count then
      order[#order + 1] = last + d
    end
  end
  local taken, low, high = require("agent.text").take_lines(buf, order, M.CONTEXT_CHARS)
  local lines = {}
  for n = low, high do
    lines[#lines + 1] = taken[n]
  end
  return table.concat(lines, "\n")
end

--- The diagnostics on lines `first`..`last`, each as `line 12: error: message`.
function H.diagnostics(buf, first, last)
  local found = {}
  local names = { "error", "warning", "info", "hint" }
  for _, d in ipairs(vim.diagnostic.get(buf)) do
    if d.lnum + 1 >= first and d.lnum + 1 <= last then
      local message = tostring(d.message):gsub("\n.*", "")
      found[#found + 1] = ("line %d: %s: %s"):format(d.lnum + 1, names[d.severity] or "note", message)
    end
  end
  return found
end

-- The spinner ------------------------------------------------------------------------------

function H.spin(edit)
  H.draw_spinner(edit)
  edit.timer = edit.timer or vim.uv.new_timer()
  edit.timer:start(
    100,
    100,
    vim.schedule_wrap(function()
      if H.edits[edit.id] ~= edit or edit.proposal then
        return
      end
      edit.frame = edit.frame % #M.SPINNER + 1
      H.draw_spinner(edit)
    end)
  )
end

function H.draw_spinner(edit)
  if edit.proposal or not vim.api.nvim_buf_is_valid(edit.buf) then
    return
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(edit.buf, H.ns, edit.range, {})
  if not pos[1] then
    return
  end
  local stop = require("agent.config").options.keymaps.inline.stop
  local text = ("%s agent: %s"):format(M.SPINNER[edit.frame], edit.status)
  if stop then
    text = ("%s · %s stops"):format(text, stop)
  end
  edit.spinner = vim.api.nvim_buf_set_extmark(edit.buf, H.ns, pos[1], 0, {
    id = edit.spinner,
    virt_text = { { " " .. text, "AgentInlineSpinner" } },
    virt_text_pos = "eol",
  })
end

function H.unspin(edit)
  if edit.timer then
    edit.timer:stop()
  end
  if edit.spinner and vim.api.nvim_buf_is_valid(edit.buf) then
    pcall(vim.api.nvim_buf_del_extmark, edit.buf, H.ns, edit.spinner)
  end
  edit.spinner = nil
end

-- The proposal -----------------------------------------------------------------------------

--- Where each row (0-based) of `before` is in `now`: a function of the row, shifted by the
--- lines the person added or removed above it (by one diff of the two, computed once; the rows
--- as they are when nothing changed). Whether the lines are still the same is checked apart.
---@param before string[]
---@param now string[]
---@param unchanged boolean
---@return fun(row: integer): integer
function H.shifter(before, now, unchanged)
  if unchanged then
    return function(row)
      return row
    end
  end
  local a = table.concat(before, "\n") .. "\n"
  local b = table.concat(now, "\n") .. "\n"
  local diff = vim.diff(a, b, { result_type = "indices" })
  return function(row)
    local delta = 0
    for _, h in ipairs(diff) do
      local start_a, count_a, count_b = h[1], h[2], h[4]
      -- A deletion or change covers rows start_a-1 .. start_a-1+count_a-1; an insertion goes
      -- after row start_a-1 (before row start_a).
      local ends = count_a > 0 and start_a - 1 + count_a or start_a
      if ends > row then
        break
      end
      delta = delta + count_b - count_a
    end
    return row + delta
  end
end

function H.propose(edit, event)
  H.unspin(edit)
  local buf = edit.buf
  local count = vim.api.nvim_buf_line_count(buf)
  local before = edit.snapshots[event.stamp]
  local shift
  if before and event.stamp == vim.api.nvim_buf_get_changedtick(buf) then
    shift = H.shifter(before, before, true)
  else
    local now = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    shift = H.shifter(before or now, now, before == nil)
  end
  local hunks = {}
  for i, h in ipairs(event.hunks or {}) do
    local removed, added = h.removed or {}, h.added or {}
    local row = shift(h.at)
    local hunk = {
      removed = removed,
      added = added,
      shown = h.shown or added,
      state = "pending",
      drawn = "pending", -- the state the removed lines' highlight shows
      after_last = false,
    }
    if #removed > 0 then
      row = math.max(0, math.min(row, count - 1))
      if not H.same(buf, row, removed) then
        hunk.state = "stale"
      end
      hunk.drawn = hunk.state
      hunk.mark = H.removed_mark(edit, hunk, row, math.min(row + #removed, count) - 1, hunk.state)
    else
      hunk.after_last = row >= count
      row = math.max(0, math.min(row, count - 1))
      hunk.mark = vim.api.nvim_buf_set_extmark(buf, H.ns, row, 0, {
        right_gravity = false,
        invalidate = true,
      })
      -- The lines around the place it goes: if the person changes them, it is stale.
      local lines = vim.api.nvim_buf_get_lines(buf, math.max(0, row - 1), row + 1, false)
      if hunk.after_last then
        hunk.around = { above = lines[#lines] }
      else
        hunk.around = { above = row > 0 and lines[1] or nil, below = row > 0 and lines[2] or lines[1] }
      end
    end
    hunks[i] = hunk
  end
  edit.proposal = { question = event.question, hunks = hunks, current = 1 }
  H.attach(edit)
  H.map(edit, { proposal = true })
  H.draw(edit)
  H.open_folds(edit)
  -- The keys act on the hunk under the cursor: its hint says so.
  edit.follow = vim.api.nvim_create_autocmd("CursorMoved", {
    buffer = buf,
    desc = "agent: the inline proposal's hint follows the cursor",
    callback = function()
      local proposal = edit.proposal
      if not proposal then
        return
      end
      local at = H.hunk_at_cursor(edit)
      if at and at ~= proposal.current and proposal.hunks[at].state == "pending" then
        local was = proposal.current
        proposal.current = at
        H.draw(edit, { [was] = true, [at] = true })
      end
    end,
  })
  -- The cursor goes to the first hunk when the person is in this buffer, in Normal mode, and
  -- the hunk is off screen; never from another window, never mid-typing.
  if vim.api.nvim_get_current_buf() == buf and vim.api.nvim_get_mode().mode == "n" then
    local row = H.row(edit, hunks[1])
    if row and (row + 1 < vim.fn.line("w0") or row + 1 > vim.fn.line("w$")) then
      vim.api.nvim_win_set_cursor(0, { row + 1, 0 })
    end
  end
  H.settle(edit)
end

--- True when the buffer's lines from `row` are `lines`.
function H.same(buf, row, lines)
  local has = vim.api.nvim_buf_get_lines(buf, row, row + #lines, false)
  return vim.deep_equal(has, lines)
end

--- Where `hunk` starts now (0-based), or nil when its lines are gone.
function H.row(edit, hunk)
  local pos = vim.api.nvim_buf_get_extmark_by_id(edit.buf, H.ns, hunk.mark, { details = true })
  if not pos[1] or (pos[3] and pos[3].invalid) then
    return nil
  end
  return pos[1]
end

--- Tabs as the buffer shows them, for virtual lines (which do not expand them).
function H.expand(buf, text)
  if not text:find("\t", 1, true) then
    return text
  end
  local ts = vim.bo[buf].tabstop
  local out, col = {}, 0
  for char in text:gmatch(".[\128-\191]*") do
    if char == "\t" then
      local n = ts - col % ts
      out[#out + 1] = string.rep(" ", n)
      col = col + n
    else
      out[#out + 1] = char
      col = col + vim.fn.strdisplaywidth(char)
    end
  end
  return table.concat(out)
end

--- The width of the text area virtual lines are cut and padded to, and whether they are cut
--- (the buffer's window wraps): nil when no window shows the buffer. A sign column that shows
--- only with signs ('signcolumn' "auto") is counted as if shown: the proposal brings signs.
function H.width(edit)
  local win = vim.fn.bufwinid(edit.buf)
  if win == -1 then
    return nil, nil
  end
  local info = vim.fn.getwininfo(win)[1]
  local textoff = info and info.textoff or 0
  local signs = vim.wo[win].signcolumn
  if signs:find("^auto") and textoff < 2 + (vim.wo[win].number and vim.wo[win].numberwidth or 0) then
    textoff = textoff + 2
  end
  local width = math.max(10, (info and info.width or vim.o.columns) - textoff)
  -- Without 'wrap', a virtual line scrolls with the text where it can (0.11); elsewhere it is
  -- cut as with 'wrap': the person sees every character of what they may keep.
  return (vim.wo[win].wrap or not H.SCROLLS) and width or nil, width
end

--- The virtual lines of an added line: cut into `width` columns (nil: not cut), so a long line
--- reads whole as the buffer's own lines do, each padded to `pad` columns so the added block
--- (an empty line too) shows as one.
function H.virtual(edit, text, group, width, pad)
  text = H.expand(edit.buf, text)
  local pieces = {}
  if not width or vim.fn.strdisplaywidth(text) <= width then
    pieces[1] = text
  else
    local rest = text
    repeat
      local piece = vim.fn.strcharpart(rest, 0, width)
      while vim.fn.strdisplaywidth(piece) > width and #piece > 1 do
        piece = vim.fn.strcharpart(piece, 0, vim.fn.strchars(piece) - 1)
      end
      pieces[#pieces + 1] = piece
      rest = rest:sub(#piece + 1)
    until rest == ""
  end
  local lines = {}
  for i, piece in ipairs(pieces) do
    local short = pad and pad - vim.fn.strdisplaywidth(piece) or 0
    lines[i] = { { short > 0 and piece .. string.rep(" ", short) or piece, group } }
  end
  return lines
end

--- The signs and highlights of each state: the sign on the lines a hunk removes (or, for an
--- insertion, on the line it follows), the removed lines' highlight, the sign's group.
H.LOOK = {
  pending = { sign = "-", removed = "AgentInlineRemoved", group = "AgentInlineSign", label = "" },
  kept = { sign = "✓", removed = "AgentInlineRemoved", group = "AgentInlineAdded", label = " · kept" },
  dropped = { sign = "✗", group = "AgentInlineDropped", label = " · dropped" },
  stale = {
    sign = "!",
    removed = "AgentInlineStale",
    group = "AgentInlineStale",
    label = " · stale: you changed these lines",
  },
}

--- Sets the extmark over rows `row`..`last` (0-based, inclusive): the removed lines' highlight
--- and sign as `state` has them.
function H.removed_mark(edit, hunk, row, last, state)
  local look = H.LOOK[state]
  local line = vim.api.nvim_buf_get_lines(edit.buf, last, last + 1, false)[1] or ""
  return vim.api.nvim_buf_set_extmark(edit.buf, H.ns, row, 0, {
    id = hunk.mark,
    end_row = last,
    end_col = #line,
    hl_group = look.removed,
    hl_eol = true,
    sign_text = look.sign,
    sign_hl_group = look.group,
    strict = false,
    priority = 200,
  })
end

--- Draws the hunks `only` names (nil: all) as their states say: a pending one with its removed
--- lines highlighted and its added lines below, a kept one the same with its sign, a dropped
--- one with its lines as they are, a stale one marked; the keys' hint on the current one.
function H.draw(edit, only)
  local buf = edit.buf
  local proposal = edit.proposal
  if not proposal then
    return
  end
  local keys = require("agent.config").options.keymaps.inline
  local total = #proposal.hunks
  local width, pad = H.width(edit)
  local count = vim.api.nvim_buf_line_count(buf)
  for i, hunk in ipairs(proposal.hunks) do
    local row = (only == nil or only[i]) and H.row(edit, hunk)
    if row then
      local look = H.LOOK[hunk.state]
      local lines = {}
      if hunk.state == "pending" or hunk.state == "kept" then
        -- A run of blank lines is one line saying how many: what follows it is on screen.
        local blank = 0
        local function flush_blank()
          if blank > 2 then
            vim.list_extend(
              lines,
              H.virtual(edit, ("⋮ %d blank lines"):format(blank), "AgentInlineAdded", width, pad)
            )
          else
            for _ = 1, blank do
              vim.list_extend(lines, H.virtual(edit, "", "AgentInlineAdded", width, pad))
            end
          end
          blank = 0
        end
        for _, text in ipairs(hunk.shown) do
          if vim.trim(text) == "" then
            blank = blank + 1
          else
            flush_blank()
            vim.list_extend(lines, H.virtual(edit, text, "AgentInlineAdded", width, pad))
          end
        end
        flush_blank()
      end
      local hint = ("hunk %d/%d%s"):format(i, total, look.label)
      if i == proposal.current and hunk.state == "pending" then
        local parts = {}
        for _, pair in ipairs({ { "keep", "keep" }, { "drop", "drop" }, { "help", "more" } }) do
          if keys[pair[1]] then
            parts[#parts + 1] = ("%s %s"):format(keys[pair[1]], pair[2])
          end
        end
        hint = ("%s · %s"):format(hint, table.concat(parts, " · "))
      end
      local hint_group = hunk.state == "stale" and "AgentInlineStale" or "AgentInlineHint"
      -- The view (the added lines, the hint) goes below the hunk's last removed line; for an
      -- insertion below the line before it (with the sign), or above the first line.
      local nremoved = #hunk.removed
      local at, above, sign = nil, false, nil
      if nremoved > 0 then
        at = math.min(row + nremoved - 1, count - 1)
      elseif hunk.after_last then
        at, sign = count - 1, look.sign
      elseif row > 0 then
        at, sign = row - 1, look.sign
      else
        at, above, sign = 0, true, look.sign
      end
      local opts = {
        id = hunk.view,
        virt_lines = #lines > 0 and lines or nil,
        virt_lines_above = above,
        virt_text = { { " " .. hint, hint_group } },
        virt_text_pos = "eol",
        sign_text = sign,
        sign_hl_group = sign and look.group or nil,
        priority = 200,
      }
      if H.SCROLLS then
        opts.virt_lines_overflow = "scroll"
      end
      hunk.view = vim.api.nvim_buf_set_extmark(buf, H.ns, at, 0, opts)
      -- The removed lines' highlight and sign, set again only when the state changed.
      if nremoved > 0 and hunk.drawn ~= hunk.state then
        hunk.drawn = hunk.state
        local pos = vim.api.nvim_buf_get_extmark_by_id(buf, H.ns, hunk.mark, { details = true })
        if pos[1] then
          H.removed_mark(edit, hunk, pos[1], (pos[3] or {}).end_row or pos[1], hunk.state)
        end
      end
    end
  end
end

--- Virtual lines scroll with 'nowrap' where Neovim lets them (0.11).
H.SCROLLS = vim.fn.has("nvim-0.11") == 1

--- Marks the pending hunks whose lines the person changed as stale (never applied).
function H.check_stale(edit)
  local proposal = edit.proposal
  if not proposal then
    return
  end
  local changed = false
  for _, hunk in ipairs(proposal.hunks) do
    if (hunk.state == "pending" or hunk.state == "kept") and not H.still(edit, hunk) then
      hunk.state = "stale"
      changed = true
    end
  end
  if changed then
    H.draw(edit)
    H.settle_when_idle(edit)
  end
end

--- True while `hunk` can still be applied where it was shown: its removed lines are there as
--- they were, or for an insertion, the lines around the place it goes.
function H.still(edit, hunk)
  local row = H.row(edit, hunk)
  if not row then
    return false
  end
  if #hunk.removed > 0 then
    return H.same(edit.buf, row, hunk.removed)
  end
  local around = hunk.around or {}
  local above = row > 0 and vim.api.nvim_buf_get_lines(edit.buf, row - 1, row, false)[1] or nil
  local below = not hunk.after_last and vim.api.nvim_buf_get_lines(edit.buf, row, row + 1, false)[1] or nil
  if hunk.after_last then
    above = vim.api.nvim_buf_get_lines(edit.buf, -2, -1, false)[1]
  end
  return above == around.above and below == around.below
end

--- Settles the proposal once no hunk is left undecided (a stale one is decided), but never in
--- the middle of the person's typing: what they type and the kept hunks are separate undo
--- steps. In Insert mode it waits for them to leave it.
function H.settle_when_idle(edit)
  if vim.api.nvim_get_mode().mode == "n" then
    H.settle(edit)
    return
  end
  if edit.settling then
    return -- already waiting
  end
  edit.settling = true
  vim.api.nvim_create_autocmd("ModeChanged", {
    pattern = "*:n",
    once = true,
    desc = "agent: settle the inline proposal once the person stops typing",
    callback = function()
      vim.schedule(function()
        edit.settling = false
        if H.edits[edit.id] == edit and edit.proposal then
          H.check_stale(edit)
          H.settle_when_idle(edit)
        end
      end)
    end,
  })
end

--- Watches the buffer for the person's changes while a proposal is open.
function H.attach(edit)
  if edit.attached then
    return
  end
  edit.attached = true
  vim.api.nvim_buf_attach(edit.buf, false, {
    on_lines = function()
      if H.edits[edit.id] ~= edit then
        return true -- detach
      end
      if H.applying or not edit.proposal then
        return
      end
      vim.schedule(function()
        if H.edits[edit.id] == edit then
          H.check_stale(edit)
        end
      end)
    end,
    on_reload = function()
      -- The file was read again (:edit, a checktime): no line is the one shown any more.
      vim.schedule(function()
        if H.edits[edit.id] == edit and edit.proposal then
          for _, hunk in ipairs(edit.proposal.hunks) do
            if hunk.state == "pending" or hunk.state == "kept" then
              hunk.state = "stale"
            end
          end
          H.draw(edit)
          H.settle_when_idle(edit)
        end
      end)
    end,
    on_detach = function()
      edit.attached = false
    end,
  })
end

--- The undecided hunk under the cursor, else the current one (the hint's), by its place.
function H.at_cursor(edit)
  local i = H.hunk_at_cursor(edit)
  if i then
    return edit.proposal.hunks[i].state == "pending" and i or nil
  end
  -- Off every hunk: the current one, only while it is on screen (never one the person cannot
  -- see).
  local current = edit.proposal.current
  local row = H.row(edit, edit.proposal.hunks[current])
  local win = vim.fn.bufwinid(edit.buf)
  if row and win ~= -1 then
    local top, bottom = vim.fn.line("w0", win), vim.fn.line("w$", win)
    if row + 1 >= top and row + 1 <= bottom then
      return current
    end
  end
  return nil
end

--- The hunk the keep and drop keys act on, or nil after saying where to go.
function H.target(edit)
  local i = H.at_cursor(edit)
  if not i then
    local next_key = require("agent.config").options.keymaps.inline.next
    vim.notify(
      ("agent: no undecided hunk here%s"):format(next_key and (" (%s goes to the next)"):format(next_key) or ""),
      vim.log.levels.INFO
    )
  end
  return i
end

--- The hunk whose lines the cursor is on (an insertion's: the line it follows), or nil.
function H.hunk_at_cursor(edit)
  local line = vim.api.nvim_win_get_cursor(0)[1] - 1
  for i, hunk in ipairs(edit.proposal.hunks) do
    local row = H.row(edit, hunk)
    if row then
      local first = #hunk.removed == 0 and not hunk.after_last and math.max(0, row - 1) or row
      if line >= first and line < row + math.max(1, #hunk.removed) then
        return i
      end
    end
  end
  return nil
end

--- Opens the person's closed folds over the proposal's hunks, in every window showing it (a
--- hunk in a closed fold could be kept unseen), and shows the lines an insertion puts above the
--- first line, which a window at the top would otherwise leave above its view.
function H.open_folds(edit)
  for _, win in ipairs(vim.fn.win_findbuf(edit.buf)) do
    vim.api.nvim_win_call(win, function()
      local fill = 0
      for _, hunk in ipairs(edit.proposal.hunks) do
        local row = H.row(edit, hunk)
        if row and vim.fn.foldclosed(row + 1) ~= -1 then
          vim.cmd(("silent! %dfoldopen!"):format(row + 1))
        end
        if row == 0 and #hunk.removed == 0 and not hunk.after_last then
          local details = vim.api.nvim_buf_get_extmark_by_id(edit.buf, H.ns, hunk.view, { details = true })[3]
          fill = fill + #((details or {}).virt_lines or {})
        end
      end
      if fill > 0 and vim.fn.line("w0") == 1 then
        vim.fn.winrestview({ topfill = fill })
      end
    end)
  end
end

--- Moves to the next (`step` 1) or previous (-1) hunk still undecided, the cursor with it.
--- With `on_screen`, the cursor goes there only when it is on screen: the view never scrolls
--- under the person after a keep or a drop (the hint moves; `]h` goes there).
function H.move(edit, step, on_screen)
  local proposal = edit.proposal
  local total = #proposal.hunks
  local at = H.hunk_at_cursor(edit) or proposal.current
  for n = 1, total do
    local i = (at - 1 + step * n) % total + 1
    if proposal.hunks[i].state == "pending" then
      local was = proposal.current
      proposal.current = i
      local row = H.row(edit, proposal.hunks[i])
      local shown = row and row + 1 >= vim.fn.line("w0") and row + 1 <= vim.fn.line("w$")
      if row and (shown or not on_screen) then
        vim.api.nvim_win_set_cursor(0, { row + 1, 0 })
        vim.cmd("silent! normal! zv")
      end
      -- Only the two hints that change.
      H.draw(edit, { [was] = true, [i] = true })
      return
    end
  end
end

--- Sets hunk `i` (nil: every pending one) to `state`, then moves on or finishes.
function H.decide(edit, i, state)
  local proposal = edit.proposal
  if not proposal then
    return
  end
  local changed = {}
  for n, hunk in ipairs(proposal.hunks) do
    if (i == nil or n == i) and hunk.state == "pending" then
      hunk.state = state
      changed[n] = true
    end
  end
  -- The person's own changes were watched for (H.attach), and every kept hunk is checked
  -- once more as it is applied.
  if not H.settle(edit) then
    H.draw(edit, changed)
    H.move(edit, 1, true)
  end
end

--- When no hunk is left undecided: applies the kept ones as one undo step, clears the
--- proposal and answers the backend. True when it did.
function H.settle(edit)
  local proposal = edit.proposal
  if not proposal then
    return false
  end
  for _, hunk in ipairs(proposal.hunks) do
    if hunk.state == "pending" then
      return false
    end
  end
  local buf = edit.buf
  local answer = {}
  local applied = 0
  H.applying = true
  local ok, err = pcall(function()
    -- The kept hunks are an undo step of their own, not joined to the person's last change.
    vim.api.nvim_buf_call(buf, function()
      vim.go.undolevels = vim.go.undolevels
    end)
    -- From the bottom up, so the rows above stay where they are; each checked once more.
    for i = #proposal.hunks, 1, -1 do
      local hunk = proposal.hunks[i]
      if hunk.state == "kept" then
        local row = H.row(edit, hunk)
        if not row or not H.still(edit, hunk) then
          hunk.state = "stale"
        elseif #hunk.removed == 0 and hunk.after_last then
          local count = vim.api.nvim_buf_line_count(buf)
          vim.api.nvim_buf_set_lines(buf, count, count, false, hunk.added)
          applied = applied + 1
        else
          vim.api.nvim_buf_set_lines(buf, row, row + #hunk.removed, false, hunk.added)
          applied = applied + 1
        end
      end
    end
  end)
  H.applying = false
  for i, hunk in ipairs(proposal.hunks) do
    answer[i] = hunk.state
  end
  H.clear(edit)
  if not ok then
    -- Nothing was applied (or what was is taken back): each kept hunk failed, and why is said.
    if applied > 0 then
      pcall(vim.api.nvim_buf_call, buf, function()
        vim.cmd("silent! undo")
      end)
    end
    local why = tostring(err):gsub("^[^:]*:%d+: ", "")
    vim.notify(
      ("agent: the kept hunks could not be applied to the buffer (%s); nothing was changed, and :Agent edit asks again"):format(
        why
      ),
      vim.log.levels.ERROR
    )
    for i, state in ipairs(answer) do
      answer[i] = state == "kept" and "failed" or state
    end
  end
  H.answer(proposal.question, answer)
  return true
end

function H.answer(question, hunks)
  require("agent.rpc.wire").notify(require("agent.rpc.wire").method.INLINE_ANSWER, {
    question = question,
    hunks = hunks,
  })
end

--- Clears the proposal's marks and keys; the edit runs on (its spinner again).
function H.clear(edit)
  if vim.api.nvim_buf_is_valid(edit.buf) then
    for _, hunk in ipairs(edit.proposal and edit.proposal.hunks or {}) do
      pcall(vim.api.nvim_buf_del_extmark, edit.buf, H.ns, hunk.mark)
      if hunk.view then
        pcall(vim.api.nvim_buf_del_extmark, edit.buf, H.ns, hunk.view)
      end
    end
  end
  edit.proposal = nil
  H.unfollow(edit)
  H.unmap(edit)
  H.map(edit, { stop = true })
  if H.edits[edit.id] == edit then
    edit.status = "the model goes on"
    H.spin(edit)
  end
end

--- Stops edit `edit`: the backend stops its turn; an open proposal ends unapplied.
function H.stop(edit)
  require("agent.rpc.wire").notify(require("agent.rpc.wire").method.INLINE_STOP, {
    conversation = edit.conversation,
    inline = edit.id,
  })
  edit.status = "stopping"
  H.finish(edit)
end

function H.unfollow(edit)
  if edit.follow then
    pcall(vim.api.nvim_del_autocmd, edit.follow)
    edit.follow = nil
  end
end

--- Forgets edit `edit`: its marks, its keys, its spinner.
function H.finish(edit)
  H.unfollow(edit)
  H.unspin(edit)
  if edit.timer and not edit.timer:is_closing() then
    edit.timer:close()
  end
  edit.timer = nil
  if edit.proposal then
    local proposal = edit.proposal
    edit.proposal = nil
    H.answer(
      proposal.question,
      vim.tbl_map(function()
        return "dropped"
      end, proposal.hunks)
    )
  end
  H.edits[edit.id] = nil
  if H.of_buffer[edit.buf] == edit.id then
    H.of_buffer[edit.buf] = nil
  end
  if vim.api.nvim_buf_is_valid(edit.buf) then
    vim.api.nvim_buf_clear_namespace(edit.buf, H.ns, 0, -1)
  end
  H.unmap(edit)
end

-- The keys ---------------------------------------------------------------------------------

--- Maps the edit's keys in its buffer: `stop` alone while the model writes, all of them while
--- a proposal is open. The person's own buffer-local maps of those keys come back after.
function H.map(edit, which)
  H.unmap(edit)
  local keys = require("agent.config").options.keymaps.inline
  local actions = {
    keep = function()
      local i = H.target(edit)
      if i then
        H.decide(edit, i, "kept")
      end
    end,
    drop = function()
      local i = H.target(edit)
      if i then
        H.decide(edit, i, "dropped")
      end
    end,
    keep_all = function()
      H.decide(edit, nil, "kept")
    end,
    drop_all = function()
      H.decide(edit, nil, "dropped")
    end,
    next = function()
      H.move(edit, 1)
    end,
    prev = function()
      H.move(edit, -1)
    end,
    help = function()
      require("agent.keyhelp").show(edit.buf, "inline edit's proposal")
    end,
    stop = function()
      H.stop(edit)
      vim.notify("agent: the edit was stopped", vim.log.levels.INFO)
    end,
  }
  for _, pair in ipairs(H.ACTIONS) do
    local action, desc = pair[1], pair[2]
    local lhs = keys[action]
    if lhs and (which.proposal or action == "stop") then
      -- The person's own map of the key in this buffer (not another buffer's, not ours).
      local saved = vim.api.nvim_buf_call(edit.buf, function()
        return vim.fn.maparg(lhs, "n", false, true)
      end)
      if saved and saved.buffer == 1 and not tostring(saved.desc or ""):find("^agent:") then
        edit.saved_maps[#edit.saved_maps + 1] = saved
      end
      vim.keymap.set("n", lhs, actions[action], { buffer = edit.buf, desc = "agent: " .. desc, nowait = true })
      edit.mapped[#edit.mapped + 1] = lhs
    end
  end
end

function H.unmap(edit)
  if not vim.api.nvim_buf_is_valid(edit.buf) then
    edit.mapped, edit.saved_maps = {}, {}
    return
  end
  for _, lhs in ipairs(edit.mapped) do
    pcall(vim.keymap.del, "n", lhs, { buffer = edit.buf })
  end
  vim.api.nvim_buf_call(edit.buf, function()
    for _, saved in ipairs(edit.saved_maps) do
      pcall(vim.fn.mapset, "n", false, saved)
    end
  end)
  edit.mapped, edit.saved_maps = {}, {}
end

local group = vim.api.nvim_create_augroup("agent.inline", { clear = true })

--- A window resized or 'wrap' changed cuts the added lines again.
vim.api.nvim_create_autocmd({ "WinResized", "VimResized", "OptionSet", "BufWinEnter" }, {
  group = group,
  desc = "agent: an inline proposal's added lines fit the window again",
  callback = function(args)
    if args.event == "OptionSet" and args.match ~= "wrap" and args.match ~= "signcolumn" then
      return
    end
    if args.event == "BufWinEnter" and not H.of_buffer[args.buf] then
      return
    end
    for _, edit in pairs(H.edits) do
      if edit.proposal and vim.api.nvim_buf_is_valid(edit.buf) then
        H.draw(edit)
      end
    end
  end,
})

--- A buffer wiped out stops its edit.
vim.api.nvim_create_autocmd({ "BufWipeout", "BufUnload" }, {
  group = group,
  desc = "agent: a buffer closed stops its inline edit",
  callback = function(args)
    local id = H.of_buffer[args.buf]
    if id and H.edits[id] then
      H.stop(H.edits[id])
    end
  end,
})

return M
