--- Writes the conversation into the chat buffer. Streaming must not slow Neovim down as the
--- conversation grows (SPEC section 6), and a resumed conversation of thousands of rows must be
--- shown at once, so:
--- - a batch of events is first written into a document in Lua (its lines, highlights, rows and
---   folds); at the batch's end the document goes to the end of the buffer in one
---   nvim_buf_set_text, its highlights and row marks as extmarks, its folds in one window call;
--- - a tool's output is written below its row, folded with it; rows and blocks (thoughts, plans)
---   are rewritten in place: in the document while they are still in it, else in the buffer,
---   found again through an extmark.
--- Live events and a replayed conversation take the same way, so a resumed chat looks as it did.
--- A chat window whose cursor is on the last line follows the text, like a log.

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local markdown = require("agent.chat.markdown")
local text = require("agent.text")
local window = require("agent.chat.window")

local M = {}
local H = {}
H.conversation = select(2, ...) -- the number of the conversation this copy serves

H.ns = vim.api.nvim_create_namespace("agent.chat") -- highlights
H.ns_rows = vim.api.nvim_create_namespace("agent.chat.rows") -- where each tool row is
H.ns_parked = vim.api.nvim_create_namespace("agent.chat.parked") -- see H.park
H.ns_below = vim.api.nvim_create_namespace("agent.chat.below") -- the `↓ new output` marker

--- Rows written to the chat, by id (a tool call's, or a block's): { name, mark (row extmark),
--- lines (output lines under it), ok, note (how its approval was answered), folded }.
M.tools = {}

H.pending = {} -- pieces not yet in the document: { text, hl = group?, tool = id? }
H.doc = nil ---@type agent.ChatDocument? what the batch wrote, not yet in the buffer
H.batching = false
H.tail = "" -- the last two bytes of the chat's text, pending pieces included ("" = empty)
H.end_row, H.end_col = 0, 0 -- where the buffer's text ends (pending pieces excluded)
H.outputs = {} -- { tool, lines } from M.put_output, put in at the batch's end
H.open_block = nil -- the block (thought, plan) being written, until something else is
H.block_count = 0
H.prose = false -- a region of prose (markdown.lua) is open: the last piece written was prose

--- Makes the buffers if they are missing; a new chat buffer starts with nothing written.
function M.ensure()
  if window.ensure_buffers() then
    H.forget()
    markdown.warm()
  end
end

--- Empties the chat.
function M.clear()
  H.forget()
  local buf = window.buf
  if buf and vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_clear_namespace(buf, H.ns, 0, -1)
    vim.api.nvim_buf_clear_namespace(buf, H.ns_rows, 0, -1)
    vim.api.nvim_buf_clear_namespace(buf, H.ns_below, 0, -1)
    H.below = {}
    markdown.reset(buf)
    H.modify(function()
      vim.api.nvim_buf_set_lines(buf, 0, -1, true, {})
    end)
  end
end

--- Holds buffer writes until end_batch(), so one batch of events is one buffer call.
function M.begin_batch()
  H.batching = true
end

--- Writes what the batch queued.
function M.end_batch()
  H.batching = false
  M.flush()
  H.put_outputs()
  markdown.update()
end

--- Queues `s` at the end of the chat (M.write() or the batch's end writes it). A piece with
--- `hl` (a highlight group) or `tool` (the id whose row it is) starts a line; the caller makes
--- sure of that with M.newline().
---@param s string
---@param hl? string
---@param tool? string
function M.put(s, hl, tool)
  if s == "" then
    return
  end
  H.pending[#H.pending + 1] = { text = s, hl = hl, tool = tool }
  H.tail = #s >= 2 and s:sub(-2) or (H.tail .. s):sub(-2) -- never a copy of a long piece
end

--- Writes the queued text now, unless a batch of events is being handled (it writes at its end).
function M.write()
  if not H.batching then
    M.flush()
    markdown.update()
  end
end

--- Ends the current line unless the text is at the start of one.
function M.newline()
  if H.tail ~= "" and H.tail:sub(-1) ~= "\n" then
    M.put("\n")
  end
end

--- Leaves one blank line before what comes next (nothing at the top of the chat).
function M.blank_line()
  if H.tail == "" or H.tail == "\n" or H.tail == "\n\n" then
    return
  end
  M.put(H.tail:sub(-1) == "\n" and "\n" or "\n\n")
end

---@class agent.ChatDocument
---@field lines string[] its lines; the first continues the buffer's last line
---@field hls { [1]: integer, [2]: integer, [3]: integer, [4]: integer, [5]: string, [6]: integer? }[] highlights: start row, start col, end row, end col (rows from the document's first line, ordered by start), group, priority
---@field rows table[] the rows (tools, blocks) whose line is in it
---@field prose { [1]: boolean, [2]: integer }[] where regions of prose start (true) and end (false), by document row

--- Moves the pending pieces into the batch's document, and the document into the buffer unless
--- a batch is being handled (its end does that).
function M.flush()
  if #H.pending > 0 then
    H.append(H.pending)
    H.pending = {}
  end
  if not H.batching then
    H.commit()
  end
end

--- Writes everything queued to the buffer now, even while a batch is handled: for a handler
--- that reads the buffer back.
function M.commit()
  if #H.pending > 0 then
    H.append(H.pending)
    H.pending = {}
  end
  H.commit()
  H.put_outputs()
end

--- The row a tool's (or block's) line is on now, or nil when it was never written.
---@return integer?
function M.row_of(tool)
  if not tool.mark and not tool.doc and #H.pending > 0 then
    -- Its row may still be a pending piece: written to the document, it has one.
    H.append(H.pending)
    H.pending = {}
  end
  if tool.doc and tool.doc == H.doc then
    return H.end_row + tool.doc_row
  end
  if not tool.mark then
    return nil
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(window.buf, H.ns_rows, tool.mark, {})
  return pos[1]
end

--- Rewrites a tool's row (one line, at `row`) as `s`, followed by the approval decision if there
--- was one, and puts `output` below it (replacing what was there), folded with the row unless
--- `opts.fold` is false; `opts.line_hls[i]` highlights output line i over the output's own
--- highlight (an edit's diff). One buffer call.
---@param opts? { fold?: boolean, output_hl?: string, line_hls?: table<integer, string> }
function M.write_row(tool, row, s, hl, output, opts)
  opts = opts or {}
  local buf = window.buf
  if tool.note then
    if tool.note:match("^refused") then
      -- The summary's own "declined" says it again: once is enough.
      s = s:gsub(": declined$", ""):gsub(" %-> declined$", "")
    end
    s = s .. " · " .. tool.note
  end
  local lines = { s }
  for _, line in ipairs(output) do
    lines[#lines + 1] = line
  end
  if tool.doc and tool.doc == H.doc then
    if H.rewrite_last(tool, row - H.end_row, lines, hl, opts) then
      return
    end
    -- Lines follow it in the document: write the document out and rewrite the row in the buffer.
    H.commit()
    row = assert(M.row_of(tool))
  end
  local followers = H.followers()
  -- The row and the output written under it before (an updated tool call, a growing thought).
  local old = tool.lines or 0
  for _, win in ipairs(old > 0 and window.chat_windows() or {}) do
    H.unfold(win, row)
  end
  vim.api.nvim_buf_clear_namespace(buf, H.ns, row, row + 1 + old)
  H.modify(function()
    vim.api.nvim_buf_set_lines(buf, row, row + 1 + old, true, lines)
  end)
  H.end_row = H.end_row + #output - old
  tool.lines = #output
  tool.mark = vim.api.nvim_buf_set_extmark(buf, H.ns_rows, row, 0, { id = tool.mark })
  vim.api.nvim_buf_set_extmark(buf, H.ns, row, 0, { end_row = row, end_col = #s, hl_group = hl })
  if #output > 0 then
    vim.api.nvim_buf_set_extmark(buf, H.ns, row + 1, 0, {
      end_row = row + #output,
      end_col = #output[#output],
      hl_group = opts.output_hl or "AgentToolOutput",
    })
    H.line_hls(row + 1, output, opts.line_hls)
    tool.folded = opts.fold ~= false
    if tool.folded then
      for _, win in ipairs(window.chat_windows()) do
        H.fold(win, row, #output)
      end
    end
  end
  H.follow(followers)
  if old > 0 and (tool.folded or #output < old) then
    -- The end came up (a running command's live lines gave way to its closed fold): a window
    -- following the end shows as much as fits above it again, not rows of nothing below.
    for _, win in ipairs(followers) do
      vim.api.nvim_win_call(win, function()
        vim.cmd("normal! zb")
      end)
    end
  end
end

--- Puts `output` under the row of `tool`, which has none yet, highlighted and folded with it: a
--- resumed row's output, sent once every row is shown. Only lines are added (the row stays as it
--- is); a batch's outputs go in at its end, from the bottom up, and their folds in one command a
--- window.
---@param output string[]
---@param line_hls? table<integer, string> highlights of single output lines, as in M.write_row
function M.put_output(tool, output, line_hls)
  if #output > 0 then
    H.outputs[#H.outputs + 1] = { tool = tool, lines = output, line_hls = line_hls }
  end
  if not H.batching then
    H.put_outputs()
  end
end

--- What a closed fold in the chat shows (lua/agent/chat/fold.lua, which the chat window's
--- 'foldtext' calls without requiring this module).
M.foldtext = require("agent.chat.fold").foldtext

--- Shows `hint` after the text of row `row` (0-based), dimmed, without changing the text.
---@param row integer
---@param hint string
function M.hint(row, hint)
  vim.api.nvim_buf_set_extmark(window.buf, H.ns, row, 0, {
    virt_text = { { "  " .. hint, "AgentInputHint" } },
    virt_text_pos = "eol",
  })
end

--- A tool's output as the lines under its row: indented, empty lines left empty.
---@param output any
---@return string[]
function M.indented(output)
  return text.lines(output, "  ")
end

--- The block (thought, plan) of `kind` being written, or a new one: a row titled `title` at the
--- end of the chat, with lines under it rewritten in place as it grows. Anything else written
--- ends it (M.end_block).
function M.block(kind, title, hl)
  local block = H.open_block
  if block and block.kind == kind then
    return block
  end
  H.block_count = H.block_count + 1
  local id = ("%s-%d"):format(kind, H.block_count)
  block = { name = kind, kind = kind, id = id, text = "", hl = hl }
  M.tools[id] = block
  M.newline()
  M.put(title, hl, id)
  M.put("\n")
  M.flush()
  H.open_block = block
  return block
end

--- Ends the open block unless the event of type `kind` continues it.
---@param kind string
function M.end_block(kind)
  if H.open_block and kind ~= H.open_block.kind and kind ~= "usage" then
    H.open_block = nil
  end
end

--- Folds are per window: a new chat window gets every tool's fold again.
---@param win integer
function M.refold(win)
  pcall(vim.api.nvim_win_call, win, function()
    vim.cmd("silent! normal! zE")
  end)
  for _, tool in pairs(M.tools) do
    -- A row still in the batch's document gets its folds when the document is written.
    local row = (tool.lines or 0) > 0 and tool.folded ~= false and not tool.doc and M.row_of(tool)
    if row then
      H.fold(win, row, tool.lines)
    end
  end
end

-- Helpers ------------------------------------------------------------------------------------

-- Above a tool's output highlight (extmarks default to 4096), below nothing else of ours.
H.LINE_PRIORITY = 4097

-- Highlights line i of `lines` (buffer row `first` + i - 1) with `line_hls[i]`.
function H.line_hls(first, lines, line_hls)
  for i, group in pairs(line_hls or {}) do
    local line = lines[i]
    if line then
      vim.api.nvim_buf_set_extmark(window.buf, H.ns, first + i - 1, 0, {
        end_row = first + i - 1,
        end_col = #line,
        hl_group = group,
        priority = H.LINE_PRIORITY,
      })
    end
  end
end

-- Appends `pieces` to the batch's document (a new one if there is none): their text, their
-- highlights and the rows they start.
function H.append(pieces)
  local doc = H.doc
  if not doc then
    doc = { lines = { "" }, hls = {}, rows = {}, prose = {} }
    H.doc = doc
  end
  local lines, hls, split = doc.lines, doc.hls, text.split
  local n = #lines
  for _, piece in ipairs(pieces) do
    local start_row, start_col = n - 1, #lines[n]
    H.mark_prose(doc, piece, start_row)
    local parts = split(piece.text)
    lines[n] = lines[n] .. parts[1]
    for i = 2, #parts do
      n = n + 1
      lines[n] = parts[i]
    end
    if piece.hl then
      hls[#hls + 1] = { start_row, start_col, n - 1, #lines[n], piece.hl }
    end
    local tool = piece.tool and M.tools[piece.tool]
    if tool then
      tool.doc, tool.doc_row, tool.mark = doc, start_row, nil
      doc.rows[#doc.rows + 1] = tool
    end
  end
end

-- Rewrites `tool`'s row (document row `row`) and the output under it as `lines` when nothing
-- but the line being written follows them in the document; false when something does.
function H.rewrite_last(tool, row, lines, hl, opts)
  local doc = assert(H.doc)
  local old = tool.lines or 0
  local count = #doc.lines
  -- Rows are 0-based, doc.lines 1-based: the open last line is doc.lines[count], row count - 1.
  if row + 1 + old ~= count - 1 or doc.lines[count] ~= "" then
    return false
  end
  local hls = doc.hls
  while #hls > 0 and hls[#hls][1] >= row do
    hls[#hls] = nil
  end
  for i = count, row + 1, -1 do
    doc.lines[i] = nil
  end
  for i, line in ipairs(lines) do
    doc.lines[row + i] = line
  end
  doc.lines[#doc.lines + 1] = ""
  hls[#hls + 1] = { row, 0, row, #lines[1], hl }
  local output = #lines - 1
  if output > 0 then
    hls[#hls + 1] = { row + 1, 0, row + output, #lines[#lines], opts.output_hl or "AgentToolOutput" }
    for i, group in pairs(opts.line_hls or {}) do
      local line = lines[i + 1]
      if line then
        hls[#hls + 1] = { row + i, 0, row + i, #line, group, H.LINE_PRIORITY }
      end
    end
  end
  tool.lines = output
  tool.folded = output > 0 and opts.fold ~= false
  return true
end

-- Writes the batch's document at the end of the buffer: its text in one call, then its
-- highlights, its rows' marks and (in one window call each) its folds.
function H.commit()
  local doc = H.doc
  if not doc then
    return
  end
  H.doc = nil
  if #doc.lines == 1 and doc.lines[1] == "" and #doc.rows == 0 then
    return
  end
  local buf = window.buf
  local followers = H.followers()
  H.check_end()
  local base_row, base_col = H.end_row, H.end_col
  H.modify(function()
    vim.api.nvim_buf_set_text(buf, base_row, base_col, base_row, base_col, doc.lines)
  end)
  local set_extmark = vim.api.nvim_buf_set_extmark
  for _, h in ipairs(doc.hls) do
    set_extmark(buf, H.ns, base_row + h[1], h[1] == 0 and base_col + h[2] or h[2], {
      end_row = base_row + h[3],
      end_col = h[3] == 0 and base_col + h[4] or h[4],
      hl_group = h[5],
      priority = h[6],
    })
  end
  local folds = {}
  for _, tool in ipairs(doc.rows) do
    local row = base_row + tool.doc_row
    tool.doc, tool.doc_row = nil, nil
    tool.mark = vim.api.nvim_buf_set_extmark(buf, H.ns_rows, row, 0, { id = tool.mark })
    if tool.folded and (tool.lines or 0) > 0 then
      folds[#folds + 1] = { row, tool.lines }
    end
  end
  local count = #doc.lines
  H.end_row = base_row + count - 1
  H.end_col = (count == 1 and base_col or 0) + #doc.lines[count]
  for _, edge in ipairs(doc.prose) do
    if edge[1] then
      markdown.start(buf, base_row + edge[2])
    else
      markdown.finish(buf, base_row + edge[2])
    end
  end
  if H.prose then
    markdown.changed()
  end
  if #folds > 0 then
    for _, win in ipairs(window.chat_windows()) do
      H.fold_all(win, folds)
    end
  end
  H.follow(followers)
end

-- Notes in the document where a region of prose starts (at the first line of a prose piece
-- with more than line ends in it) and where it ends (at the row a piece that is not prose
-- starts: such a piece starts a line).
function H.mark_prose(doc, piece, row)
  local prose = not piece.hl and not piece.tool
  if prose and not H.prose then
    local lead = piece.text:match("^\n*")
    if #lead < #piece.text then
      H.prose = true
      doc.prose[#doc.prose + 1] = { true, row + #lead }
    end
  elseif not prose and H.prose then
    H.prose = false
    doc.prose[#doc.prose + 1] = { false, row }
  end
end

function H.forget()
  H.prose = false
  markdown.reset()
  H.pending, M.tools, H.doc, H.outputs = {}, {}, nil, {}
  H.tail, H.end_row, H.end_col = "", 0, 0
  H.open_block = nil
end

-- The end position is tracked rather than read (reading the last line would copy it, and the
-- model may write very long lines). Should the buffer have been changed behind our back, find
-- the end again.
function H.check_end()
  local buf = window.buf
  local count = vim.api.nvim_buf_line_count(buf)
  if count ~= H.end_row + 1 then
    local last = vim.api.nvim_buf_get_lines(buf, count - 1, count, true)[1]
    H.end_row, H.end_col = count - 1, #last
  end
end

function H.modify(fn)
  local buf = window.buf
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn)
  vim.bo[buf].modifiable = false
  if not ok then
    error(err, 0)
  end
end

-- Chat windows whose cursor is on the last line: they follow the text.
function H.followers()
  local last = vim.api.nvim_buf_line_count(window.buf)
  local windows = {}
  for _, win in ipairs(window.chat_windows()) do
    if vim.api.nvim_win_get_cursor(win)[1] == last then
      windows[#windows + 1] = win
    end
  end
  return windows
end

function H.follow(windows)
  local last = vim.api.nvim_buf_line_count(window.buf)
  local following = {}
  for _, win in ipairs(windows) do
    pcall(vim.api.nvim_win_set_cursor, win, { last, 0 })
    following[win] = true
  end
  -- A window the person scrolled up in keeps its view; it is told there is more below.
  for _, win in ipairs(window.chat_windows()) do
    if not following[win] then
      H.mark_below(win)
    end
  end
end

--- Puts `↓ new output` at the bottom of chat window `win` when the buffer goes on below what
--- it shows, and clears it when it shows the end (once per window: the marker sits on the
--- window's last visible line, right-aligned).
---@param win integer
function H.mark_below(win)
  local buf = window.buf
  H.below = H.below or {}
  if not (buf and vim.api.nvim_buf_is_valid(buf) and vim.api.nvim_win_is_valid(win)) then
    if H.below[win] and buf and vim.api.nvim_buf_is_valid(buf) then
      pcall(vim.api.nvim_buf_del_extmark, buf, H.ns_below, H.below[win])
    end
    H.below[win] = nil
    return
  end
  local bottom = vim.fn.line("w$", win)
  local last = vim.api.nvim_buf_line_count(buf)
  local mark = H.below[win]
  if bottom >= last then
    if mark then
      pcall(vim.api.nvim_buf_del_extmark, buf, H.ns_below, mark)
      H.below[win] = nil
    end
    return
  end
  H.below[win] = vim.api.nvim_buf_set_extmark(buf, H.ns_below, bottom - 1, 0, {
    id = mark,
    virt_text = { { "↓ new output", "AgentNotice" } },
    virt_text_pos = "right_align",
  })
  H.watch_below()
end

-- Moves or clears the marker as the person scrolls.
function H.watch_below()
  if H.watching_below then
    return
  end
  H.watching_below = true
  vim.api.nvim_create_autocmd({ "WinScrolled", "CursorMoved", "WinResized" }, {
    group = vim.api.nvim_create_augroup("agent.chat.below." .. H.conversation, { clear = true }),
    callback = function()
      for win in pairs(H.below or {}) do
        H.mark_below(win)
      end
    end,
  })
end

--- Whether chat window `win` shows the `↓ new output` marker (for tests and statuslines).
---@param win integer
---@return boolean
function M.new_output_below(win)
  return (H.below or {})[win] ~= nil
end

-- Deletes the fold on a row (before its output is rewritten).
function H.unfold(win, row)
  pcall(vim.api.nvim_win_call, win, function()
    local view = vim.fn.winsaveview()
    vim.api.nvim_win_set_cursor(0, { row + 1, 0 })
    -- A row whose lines show open (a running terminal's) has no fold to delete.
    if vim.fn.foldlevel(row + 1) > 0 then
      vim.cmd("silent! normal! zD")
    end
    vim.fn.winrestview(view)
  end)
end

-- Puts the outputs M.put_output queued under their rows: each row found first, then the lines
-- put in from the bottom up (so the rows above stay where they were found), then highlighted
-- and folded.
function H.put_outputs()
  if #H.outputs == 0 then
    return
  end
  local queued = H.outputs
  H.outputs = {}
  H.commit() -- a row still in the batch's document goes to the buffer first
  local found = {}
  for _, item in ipairs(queued) do
    local row = (item.tool.lines or 0) == 0 and M.row_of(item.tool)
    if row then
      found[#found + 1] = { row = row, tool = item.tool, lines = item.lines, line_hls = item.line_hls }
    end
  end
  table.sort(found, function(a, b)
    return a.row > b.row
  end)
  local buf = window.buf
  local set_extmark = vim.api.nvim_buf_set_extmark
  local followers = H.followers()
  local parked = H.park()
  -- Whatever goes wrong putting them in, the windows get their cursors back.
  local ok, err = pcall(function()
    H.modify(function()
      for _, item in ipairs(found) do
        -- At the end of the row's line, not before the next line: lines put right before a fold
        -- would join it.
        local line = vim.api.nvim_buf_get_lines(buf, item.row, item.row + 1, true)[1]
        local lines = { "" }
        vim.list_extend(lines, item.lines)
        vim.api.nvim_buf_set_text(buf, item.row, #line, item.row, #line, lines)
      end
    end)
    local folds = {}
    for _, item in ipairs(found) do
      local row, lines = assert(M.row_of(item.tool)), item.lines
      set_extmark(buf, H.ns, row + 1, 0, {
        end_row = row + #lines,
        end_col = #lines[#lines],
        hl_group = "AgentToolOutput",
      })
      H.line_hls(row + 1, lines, item.line_hls)
      item.tool.lines, item.tool.folded = #lines, true
      H.end_row = H.end_row + #lines
      folds[#folds + 1] = { row, #lines }
    end
    for _, win in ipairs(window.chat_windows()) do
      H.fold_all(win, folds)
    end
  end)
  H.unpark(parked)
  if not ok then
    error(err, 0)
  end
  -- Lines put in above a window's top keep its top line where it was, which the folds then pull
  -- up to the end: a window that follows the chat gets its last line back at the bottom.
  local last = vim.api.nvim_buf_line_count(buf)
  for _, win in ipairs(followers) do
    pcall(vim.api.nvim_win_call, win, function()
      vim.api.nvim_win_set_cursor(0, { last, 0 })
      vim.cmd("normal! zb")
    end)
  end
end

-- Moves the cursor of each window showing the chat to its first line, and returns what
-- H.unpark needs to put each back. Neovim works out the top line of every window whose cursor
-- is below a line put in, after each put (over its lines' widths): for a batch of outputs put
-- above the cursor that was a large share of Neovim's time in a resume (BENCHMARKS.md). A parked
-- window has it worked out once.
-- Nothing is drawn in between: Neovim redraws after the batch.
function H.park()
  local buf, parked = window.buf, {}
  for _, win in ipairs(window.chat_windows()) do
    local view = vim.api.nvim_win_call(win, vim.fn.winsaveview)
    -- Marks that stay before what is put in at their place, as the cursor and the top would.
    local mark = function(row, col)
      return vim.api.nvim_buf_set_extmark(buf, H.ns_parked, row, col, { right_gravity = false })
    end
    parked[#parked + 1] = {
      win = win,
      view = view,
      cursor = mark(view.lnum - 1, 0),
      top = mark(view.topline - 1, 0),
    }
    vim.api.nvim_win_set_cursor(win, { 1, 0 })
  end
  return parked
end

-- Puts back what H.park moved: each window's cursor and top line where their lines are now.
function H.unpark(parked)
  local buf = window.buf
  for _, p in ipairs(parked) do
    local cursor = vim.api.nvim_buf_get_extmark_by_id(buf, H.ns_parked, p.cursor, {})
    local top = vim.api.nvim_buf_get_extmark_by_id(buf, H.ns_parked, p.top, {})
    if vim.api.nvim_win_is_valid(p.win) then
      -- A mark gone (its line deleted) leaves that part of the view as it was saved.
      p.view.lnum = cursor[1] and cursor[1] + 1 or p.view.lnum
      p.view.topline = top[1] and top[1] + 1 or p.view.topline
      pcall(vim.api.nvim_win_call, p.win, function()
        vim.fn.winrestview(p.view)
      end)
    end
  end
  vim.api.nvim_buf_clear_namespace(buf, H.ns_parked, 0, -1)
end

-- Folds a tool's row with its output, closed: the closed fold shows the row (M.foldtext).
function H.fold(win, row, lines)
  H.fold_all(win, { { row, lines } })
end

-- Folds each { row, lines } of `folds` as H.fold does, in one window call and one command line
-- (a resumed chat makes thousands). A fold is closed when it is made.
function H.fold_all(win, folds)
  local cmds = {}
  for i, fold in ipairs(folds) do
    local row, lines = fold[1], fold[2]
    cmds[i] = ("%d,%dfold"):format(row + 1, row + 1 + lines)
  end
  pcall(vim.api.nvim_win_call, win, function()
    vim.cmd(table.concat(cmds, "|"))
  end)
end

return M
