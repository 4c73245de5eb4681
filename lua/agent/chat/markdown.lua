--- Markdown highlighting for the chat, at a cost that does not grow with the conversation
--- (doc/decisions/0036-markdown-in-the-chat.md).
---
--- The chat's prose (prompts and answers, not its tool rows or notices) is cut into regions by
--- the renderer: a region starts with the first text after a header or a row, and ends at the
--- next row. The open region (the message being streamed) is parsed first, and only its
--- unsettled part: everything from the start of its last top-level block on; what an ended
--- region has left unhighlighted (a flood outran the budget) only where a window shows it,
--- never in a background pass over the whole chat. Blocks before
--- that are final (nothing later in markdown changes them), so their highlights stay in the
--- buffer as extmarks and are never computed again. The part is parsed as a string with the
--- markdown parser, its inline and code-block injections included (a block's language when
--- `vim.treesitter.language.add` finds its parser, plain otherwise), and highlighted with the
--- languages' own highlight queries, a budget of bytes a frame (a few milliseconds of work;
--- BENCHMARKS.md).
---
--- The buffer itself never gets a treesitter highlighter or regex syntax (window.lua turns
--- them off), so nothing else re-parses the growing chat on a redraw.

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local M = {}
local H = {}
H.conversation = select(2, ...) -- the number of the conversation this copy serves

--- The highlights' namespace.
M.ns = vim.api.nvim_create_namespace("agent.chat.markdown")
H.ns_start = vim.api.nvim_create_namespace("agent.chat.markdown.start") -- the open region's unsettled start
H.ns_told = vim.api.nvim_create_namespace("agent.chat.markdown.told") -- `no parser for …` notes

-- How often the region being written is highlighted again when it has new text, and how soon
-- work left over (the budget below ran out) goes on. A slow stream of a long paragraph (each
-- run parses the whole paragraph again) waits longer: the next run comes no sooner than
-- H.SHARE times the last one's time after it, so highlighting new text takes at most 1/H.SHARE
-- of a core however long the block being written is (and at most H.MAX_WAIT_MS: a first run
-- loads the queries).
H.REFRESH_MS = 100
H.SHARE = 100
H.MAX_WAIT_MS = 500
H.FRAME_MS = 16
-- How long after the chat is made M.warm loads the parsers: after `:Agent` has drawn the split.
H.WARM_MS = 150
-- Bytes parsed at most in one go: treesitter's markdown (block and inline) and the highlight
-- queries cost a few microseconds a byte (up to ~15 for some text), so the budget adapts to
-- keep one run near H.RUN_NS, between H.MIN_BUDGET and H.BUDGET bytes. A flood (megabytes a
-- second) is highlighted a little behind the text, never by freezing Neovim.
H.BUDGET = 1500
H.MIN_BUDGET = 200
H.RUN_NS = 4e6
H.budget = H.BUDGET
-- A part of more lines than this that is one block (a long list, a code block still being
-- written) is settled at its last line anyway; an open code fence is carried over (H.settle).
H.MAX_LINES = 400
-- A last line longer than this alone (a model writing one huge line) is left plain until it
-- ends.
H.MAX_BYTES = 64 * 1024
-- An ended region's backlog that starts more rows than this above a window's top is not
-- highlighted from its start: the region is cut at a block start near the top (H.jump), found
-- by scanning at most H.SCAN_LINES lines a run for code fences.
H.JUMP_ROWS = 100
H.SCAN_LINES = 4000
-- Captures that are not highlights.
H.skip = { spell = true, nospell = true, conceal = true }
-- Code blocks' languages that no parser is made for: nothing to install, nothing to say.
H.PLAIN = { text = true, txt = true, plain = true, plaintext = true, output = true, console = true }
H.told = {} ---@type table<string, true> languages whose missing parser the chat has named
H.langs = {} ---@type table<string, table|false> a block's language: the parser names it may have (`shown` the one named), false for none
-- The queries in use, held here: Neovim's own cache of them is weak, and parsing a query again
-- costs more than parsing the text (the string parser asks for `injections` each time too).
H.queries = {} ---@type table<string, { highlights: vim.treesitter.Query?, injections: vim.treesitter.Query? }>

---@class agent.MarkdownRegion
---@field buf integer
---@field mark integer where its part still to highlight begins (extmark in H.ns_start)
---@field stop integer? where it ends (an extmark there), once it has ended
---@field prefix string? an open code fence's first line, parsed before the part (H.settle)
---@field behind boolean? its last run was cut by the budget
---@field scan { row: integer, safe: integer, fence: string? }? H.jump's progress
---@field jumped integer? the window top it was last cut for (H.jump)

H.regions = {} ---@type agent.MarkdownRegion[] ended regions with text not highlighted yet, in order
H.open = nil ---@type agent.MarkdownRegion? the region being written
H.dirty = false -- the open region has text not highlighted yet
H.last = 0 -- when the open region's new text was last highlighted (hrtime)
H.wait = H.REFRESH_MS -- how long after H.last it is highlighted again (ms)
H.deferred = false -- a run waits for its time

--- True: every row counts as shown, so ended regions are highlighted to their end (benches: a
--- chat a person scrolled through).
M.everywhere = false

--- Set to a table to record each run: { start (hrtime), took (ns), bytes, CPU (ns) } (benches).
M.log = nil ---@type table[]?

--- A region of prose starts at row `row` (0-based) of `buf`; the open one ends there.
---@param buf integer
---@param row integer
function M.start(buf, row)
  M.finish(buf, row)
  if require("agent.config").options.render == false then
    return -- `render = false` in setup: the chat stays plain
  end
  local mark = vim.api.nvim_buf_set_extmark(buf, H.ns_start, row, 0, { right_gravity = false })
  H.open = { buf = buf, mark = mark }
  H.dirty, H.wait = true, H.REFRESH_MS
  H.watch()
end

--- The open region ends before row `row`: what is left of it is highlighted for good, now
--- as far as the budget goes (all of it, usually); the rest a part a frame while a window
--- shows it, and only then.
---@param buf integer
---@param row integer
function M.finish(buf, row)
  local open = H.open
  if not open then
    return
  end
  H.open, H.dirty = nil, false
  open.stop = vim.api.nvim_buf_set_extmark(buf, H.ns_start, row, 0, { right_gravity = false })
  H.regions[#H.regions + 1] = open
  H.run()
end

--- True while text written is not highlighted yet where it matters: in the open region, or in
--- an ended region a window shows (for tests and benches).
---@return boolean
function M.behind()
  return H.deferred or H.dirty or (H.open ~= nil and H.open.behind == true)
end

--- How many ended regions still have text not highlighted, shown or not (benches).
---@return integer
function M.pending()
  return #H.regions
end

--- Text went into the open region: M.update highlights it.
function M.changed()
  if H.open then
    H.dirty = true
  end
end

--- Highlights what was written since the last time, unless that was less than H.wait ago
--- (then it is done when that time is up).
function M.update()
  if H.dirty then
    H.run_after(H.wait - (vim.uv.hrtime() - H.last) / 1e6)
  end
end

--- Loads the markdown parsers and their queries a moment after the chat is made, while
--- nothing is written: done in the first answer's first run instead, it held Neovim while the
--- first words came (BENCHMARKS.md). A code block's language is loaded when one first comes.
function M.warm()
  if require("agent.config").options.render == false or H.queries.markdown then
    return
  end
  vim.defer_fn(function()
    if H.queries.markdown then
      return
    end
    H.query("markdown")
    H.query("markdown_inline")
    local ok, parser = pcall(vim.treesitter.get_string_parser, "# warm\n\n*a* `b`\n", "markdown")
    if ok then
      parser:parse(true)
    end
  end, H.WARM_MS)
end

--- Forgets every region (the chat was cleared).
---@param buf? integer
function M.reset(buf)
  H.open, H.dirty, H.regions, H.wait = nil, false, {}, H.REFRESH_MS
  H.told = {}
  if buf and vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
    vim.api.nvim_buf_clear_namespace(buf, H.ns_start, 0, -1)
    vim.api.nvim_buf_clear_namespace(buf, H.ns_told, 0, -1)
  end
end

-- Helpers ------------------------------------------------------------------------------------

-- Runs H.run in `ms` (now when that is not positive), once.
function H.run_after(ms)
  if ms <= 0 then
    H.run()
  elseif not H.deferred then
    H.deferred = true
    vim.defer_fn(function()
      H.deferred = false
      H.run()
    end, math.ceil(ms))
  end
end

-- A window scrolled or showed a buffer: an ended region's backlog it now shows is highlighted.
function H.watch()
  if H.watching then
    return
  end
  H.watching = true
  vim.api.nvim_create_autocmd({ "WinScrolled", "BufWinEnter", "WinResized" }, {
    group = vim.api.nvim_create_augroup("agent.chat.markdown." .. H.conversation, { clear = true }),
    callback = function()
      if #H.regions > 0 then
        H.run_after(H.FRAME_MS)
      end
    end,
  })
end

-- Highlights within the budget: the open region first (when it has new text, at most every
-- H.wait, or a backlog), then the ended regions' backlogs a window shows, the newest
-- first; never a region no window shows. What is left goes on a frame later.
function H.run()
  local t0, c0 = vim.uv.hrtime(), os.clock()
  local budget = H.budget
  local open = H.open
  if open and ((H.dirty and (t0 - H.last) / 1e6 >= H.wait - 1) or open.behind) then
    H.last, H.dirty = t0, false
    local used, whole = H.step(open, budget)
    open.behind = not whole
    budget = budget - used
    H.wait = math.min(H.MAX_WAIT_MS, math.max(H.REFRESH_MS, H.SHARE * (vim.uv.hrtime() - t0) / 1e6))
  end
  if budget > 0 and #H.regions > 0 then
    budget = H.run_ended(budget)
  end
  local used = H.budget - budget
  local took = vim.uv.hrtime() - t0
  if used >= H.MIN_BUDGET then
    -- The next budget: as many bytes as took RUN_NS at this run's rate, halfway there.
    local fit = H.RUN_NS * used / math.max(took, 1)
    H.budget = math.floor(math.max(H.MIN_BUDGET, math.min(H.BUDGET, (H.budget + fit) / 2)))
  end
  if M.log then
    M.log[#M.log + 1] = { t0, took, used, (os.clock() - c0) * 1e9 }
  end
  if budget <= 0 then
    H.run_after(H.FRAME_MS)
  elseif H.dirty and H.open then
    H.run_after(math.max(1, H.wait - (vim.uv.hrtime() - H.last) / 1e6))
  end
end

-- The rows windows show of `buf`: { top, bottom } (0-based, bottom excluded), and the lowest top.
function H.views(buf)
  if M.everywhere then
    return { { 0, vim.api.nvim_buf_line_count(buf) } }, 0
  end
  local views, lowest = {}, math.huge
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local top, bottom = vim.fn.line("w0", win) - 1, vim.fn.line("w$", win)
    views[#views + 1] = { top, bottom }
    lowest = math.min(lowest, top)
  end
  return views, lowest
end

-- The ended regions' part of H.run: newest first, those a window shows. Regions are in buffer
-- order, so once one ends above every window's top, so do all before it. Returns the budget
-- left.
function H.run_ended(budget)
  local get = vim.api.nvim_buf_get_extmark_by_id
  local i = #H.regions
  local views, lowest
  while budget > 0 and i >= 1 do
    local region = H.regions[i]
    local buf = region.buf
    if not vim.api.nvim_buf_is_valid(buf) then
      table.remove(H.regions, i)
    else
      if not views then
        views, lowest = H.views(buf)
      end
      local start = get(buf, H.ns_start, region.mark, {})[1]
      local stop = get(buf, H.ns_start, region.stop, {})[1]
      if not start or not stop or stop <= start then
        H.forget(region)
        table.remove(H.regions, i)
      elseif stop <= lowest then
        break -- this one and all before it are above every window
      else
        local shown = nil -- the top of a window showing some of [start, stop)
        for _, view in ipairs(views) do
          if start < view[2] and stop > view[1] then
            shown = view[1]
          end
        end
        local far = shown and start < shown - H.JUMP_ROWS
        if far and region.jumped and shown <= region.jumped + H.JUMP_ROWS then
          far = false -- no nearer block start for this view: highlighted from its start
        end
        local split = nil
        if far then
          split = H.jump(region, start, shown)
          if split then
            table.insert(H.regions, i + 1, split)
            i = i + 2 -- the part from the block start near the top, next
          elseif split == nil then
            budget = 0 -- the scan goes on next frame
          else
            region.jumped = shown
          end
        end
        if shown and split == false or (shown and not far) then
          local used, whole = H.step(region, budget)
          budget = budget - used
          if whole then
            H.forget(region)
            table.remove(H.regions, i)
          end
        end
      end
    end
    i = i - 1
  end
  return budget
end

-- Scans `region` from its start (`start`) towards row `top` for the last block start at or
-- above it that is not inside a code fence (the line after a blank line, or a fence's opening
-- line), H.SCAN_LINES lines a run. Returns the region's part from there on (the region then
-- ends there) when the scan reached `top`, false when there is none below its start, nil while
-- the scan goes on.
function H.jump(region, start, top)
  local scan = region.scan
  if not scan or scan.row < start then
    local fence = region.prefix and region.prefix:match("^ *([`~][`~][`~]+)")
    scan = { row = start, safe = start, fence = fence }
    region.scan = scan
  end
  local buf = region.buf
  local to = math.min(top, scan.row + H.SCAN_LINES)
  local lines = vim.api.nvim_buf_get_lines(buf, scan.row, to, false)
  for k, line in ipairs(lines) do
    local row = scan.row + k - 1
    local fence = line:match("^ ? ? ?([`~][`~][`~]+)")
    if scan.fence then
      local open = scan.fence
      if fence and fence:sub(1, 1) == open:sub(1, 1) and #fence >= #open and line:match("^ *[`~]+%s*$") then
        scan.fence = nil
      end
    elseif fence then
      scan.fence, scan.safe = fence, row
    elseif line == "" then
      scan.safe = row + 1
    end
  end
  scan.row = to
  if to < top then
    return nil
  end
  region.scan = nil
  local safe = scan.safe
  if safe <= start then
    return false -- no block start below its start: the region is highlighted from there
  end
  local set = vim.api.nvim_buf_set_extmark
  local part = {
    buf = buf,
    mark = set(buf, H.ns_start, safe, 0, { right_gravity = false }),
    stop = region.stop,
    jumped = top,
  }
  region.stop = set(buf, H.ns_start, safe, 0, { right_gravity = false })
  return part
end

-- Highlights the next part of `region`: from its mark to its end, or as much as `budget`
-- bytes. Returns the bytes parsed and whether the part reached the region's end.
function H.step(region, budget)
  local buf = region.buf
  if not vim.api.nvim_buf_is_valid(buf) then
    return 0, true
  end
  local get = vim.api.nvim_buf_get_extmark_by_id
  local start = get(buf, H.ns_start, region.mark, {})[1]
  local stop = region.stop and get(buf, H.ns_start, region.stop, {})[1] or vim.api.nvim_buf_line_count(buf)
  if not start or stop <= start then
    return 0, true
  end
  -- The lines within the budget (at least one), read a few at a time.
  local lines, bytes, row = {}, 0, start
  while row < stop and bytes < budget do
    local more = vim.api.nvim_buf_get_lines(buf, row, math.min(stop, row + 16), false)
    for _, line in ipairs(more) do
      if bytes >= budget then
        break
      end
      lines[#lines + 1] = line
      bytes = bytes + #line + 1
      row = row + 1
    end
  end
  local whole = row == stop
  if not region.stop and whole and #lines == 1 and #lines[1] > H.MAX_BYTES then
    return 0, true -- one huge line still being written: plain until it ends
  end
  local parser, offset = H.parse(region, start, row, lines)
  if whole and region.stop then
    return bytes, true
  end
  if parser then
    H.settle(region, parser, lines, offset, row, whole)
  end
  return bytes, whole
end

-- Parses `lines` (rows `start` to `stop` of the region's buffer, after its prefix) and puts
-- their highlights in place of those rows' old ones. Returns the parser (nil without a
-- markdown parser) and the buffer row of the source's first row.
function H.parse(region, start, stop, lines)
  local buf = region.buf
  vim.api.nvim_buf_clear_namespace(buf, M.ns, start, stop)
  -- Source row r is buffer row r + offset; a carried-over fence is source row 0, not shown.
  local offset = start
  if region.prefix then
    table.insert(lines, 1, region.prefix)
    offset = start - 1
  end
  local source = table.concat(lines, "\n")
  H.query("markdown")
  H.query("markdown_inline")
  local ok, parser = pcall(vim.treesitter.get_string_parser, source, "markdown")
  if not ok then
    return nil, offset -- no markdown parser: the chat stays plain
  end
  parser:parse(true)
  -- The last line of an open region may still be half written (a fence's ```pyt).
  local whole = region.stop and #lines or #lines - 1
  parser:for_each_tree(function(tree, ltree)
    H.apply(buf, tree, ltree:lang(), source, offset, start, whole)
  end)
  return parser, offset
end

-- Drops a region's marks; true.
function H.forget(region)
  if vim.api.nvim_buf_is_valid(region.buf) then
    vim.api.nvim_buf_del_extmark(region.buf, H.ns_start, region.mark)
    if region.stop then
      vim.api.nvim_buf_del_extmark(region.buf, H.ns_start, region.stop)
    end
  end
  return true
end

-- The captures of one tree as extmarks; an injected language's lie above the markdown ones.
-- Source rows before `whole` are complete lines. Inline markup's delimiters (`**`, `` ` ``) are
-- concealed (shown as the window's 'conceallevel' and 'concealcursor' say); a code block's
-- language without a parser is named once (H.tell).
function H.apply(buf, tree, lang, source, offset, first, whole)
  local query = H.query(lang)
  if not query then
    return
  end
  local base = lang == "markdown" and 100 or (lang == "markdown_inline" and 101 or 102)
  local set_extmark = vim.api.nvim_buf_set_extmark
  local inline = lang == "markdown_inline"
  for id, node, metadata in query:iter_captures(tree:root(), source, 0, -1) do
    local name = query.captures[id]
    if inline and name == "conceal" then
      local sr, sc, er, ec = node:range()
      if sr + offset >= first then
        set_extmark(buf, M.ns, sr + offset, sc, { end_row = er + offset, end_col = ec, conceal = "", strict = false })
      end
    elseif not H.skip[name] and name:sub(1, 1) ~= "_" then
      local sr, sc, er, ec = node:range()
      if name == "label" and lang == "markdown" and sr < whole and node:type() == "language" then
        H.tell(buf, sr + offset, vim.treesitter.get_node_text(node, source))
      end
      sr, er = sr + offset, er + offset
      if sr < first then
        sr, sc = first, 0
      end
      if er > sr or (er == sr and ec > sc) then
        local priority = metadata.priority or (metadata[id] and metadata[id].priority)
        set_extmark(buf, M.ns, sr, sc, {
          end_row = er,
          end_col = ec,
          hl_group = "@" .. name .. "." .. lang,
          priority = tonumber(priority) or base,
          strict = false,
        })
      end
    end
  end
end

-- Says once per chat, on a line of its own above a code block's fence (row `row`; a line
-- that is not text, so it neither wraps nor is cut as a narrow window's eol text would be),
-- that its language `name` has no parser, and how to get one; a language with a parser, or
-- none to get, says nothing.
function H.tell(buf, row, name)
  local names = H.langs[name]
  if names == nil then
    names = false
    local alias = name:lower()
    if not H.PLAIN[alias] and alias:match("^[%w_+#.-]+$") then
      local filetype = vim.filetype.match({ filename = "a." .. alias }) or alias
      names = { alias, vim.treesitter.language.get_lang(alias), vim.treesitter.language.get_lang(filetype) }
      names.shown = names[3] or filetype
    end
    H.langs[name] = names
  end
  if not names or H.told[names.shown] then
    return
  end
  for _, candidate in pairs(names) do
    local ok, added = pcall(vim.treesitter.language.add, candidate)
    if ok and added == true then
      return
    end
  end
  local lang = names.shown
  H.told[lang] = true
  vim.api.nvim_buf_set_extmark(buf, H.ns_told, row, 0, {
    virt_lines = { { { ("no parser for %s: :TSInstall %s"):format(lang, lang), "AgentNotice" } } },
    virt_lines_above = true,
  })
end

-- Inline markdown's highlights, with the groups Neovim's own query gives these nodes, and the
-- delimiters it conceals. That query (escapes, entities, concealed brackets, predicates
-- evaluated in Lua) takes five times as long to run over the same text, and inline text is
-- most of a chat.
H.INLINE = [[
[(emphasis_delimiter) (code_span_delimiter)] @conceal
(code_span) @markup.raw
(emphasis) @markup.italic
(strong_emphasis) @markup.strong
(strikethrough) @markup.strikethrough
[(link_text) (image_description)] @markup.link.label
(inline_link (link_destination) @markup.link.url)
(image (link_destination) @markup.link.url)
[(uri_autolink) (email_autolink)] @markup.link.url
]]

-- The highlights query of `lang` (its injections are kept alive with it).
function H.query(lang)
  local held = H.queries[lang]
  if not held then
    local highlights
    if lang == "markdown_inline" then
      local ok, query = pcall(vim.treesitter.query.parse, lang, H.INLINE)
      highlights = ok and query or nil
    else
      highlights = vim.treesitter.query.get(lang, "highlights")
    end
    held = { highlights = highlights, injections = vim.treesitter.query.get(lang, "injections") }
    H.queries[lang] = held
  end
  return held.highlights
end

-- The deepest last block of the markdown tree: sections nest, so the last block of the last
-- section.
function H.last_block(root)
  local node = root
  while true do
    local count = node:named_child_count()
    local last = count > 0 and node:named_child(count - 1) or nil
    if not last then
      return node ~= root and node or nil
    end
    if last:type() ~= "section" then
      return last
    end
    node = last
  end
end

-- Moves the region's mark to its last block: what is above it is final. When the part read
-- was cut by the budget (`whole` false) or is too long to read again each time, and that block
-- is all of it, the mark goes to the part's end (its last line when the part reaches the end of
-- the text, which may still grow); inside an open code fence its opening line is carried over.
function H.settle(region, parser, lines, offset, stop, whole)
  local tree = parser:trees()[1]
  local block = tree and H.last_block(tree:root())
  if not block then
    return
  end
  local row = block:start()
  local first = region.prefix and 1 or 0
  local to, prefix = nil, nil
  if row > first then
    to = row + offset
  elseif not whole or #lines - first > H.MAX_LINES then
    to = whole and stop - 1 or stop
    local delimiters = 0
    for child in block:iter_children() do
      if child:type() == "fenced_code_block_delimiter" then
        delimiters = delimiters + 1
      end
    end
    if block:type() == "fenced_code_block" and delimiters < 2 then
      prefix = lines[row + 1]
    end
  end
  if to and to > offset + first then
    region.prefix = prefix
    vim.api.nvim_buf_set_extmark(region.buf, H.ns_start, to, 0, { id = region.mark, right_gravity = false })
  end
end

return M
