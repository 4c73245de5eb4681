--- Writes the conversation into the chat buffer. Streaming must not slow Neovim down as the
--- conversation grows (SPEC section 6), so:
--- - text only ever goes to the end of the buffer, one nvim_buf_set_text per batch of events;
--- - the few highlights (headers, tool rows) are extmarks placed on the lines as they are written;
--- - a tool's output is written below its row, folded with it; rows and blocks (thoughts, plans)
---   are rewritten in place, found again through an extmark.
--- A chat window whose cursor is on the last line follows the text, like a log.

local text = require("agent.text")
local window = require("agent.chat.window")

local M = {}
local H = {}

H.ns = vim.api.nvim_create_namespace("agent.chat") -- highlights
H.ns_rows = vim.api.nvim_create_namespace("agent.chat.rows") -- where each tool row is

--- Rows written to the chat, by id (a tool call's, or a block's): { name, mark (row extmark),
--- lines (output lines under it), ok, note (how its approval was answered), folded }.
M.tools = {}

H.pending = {} -- pieces not yet in the buffer: { text, hl = group?, tool = id? }
H.batching = false
H.tail = "" -- the last two bytes of the chat's text, pending pieces included ("" = empty)
H.end_row, H.end_col = 0, 0 -- where the buffer's text ends (pending pieces excluded)
H.open_block = nil -- the block (thought, plan) being written, until something else is
H.block_count = 0

--- Makes the buffers if they are missing; a new chat buffer starts with nothing written.
function M.ensure()
  if window.ensure_buffers() then
    H.forget()
  end
end

--- Empties the chat.
function M.clear()
  H.forget()
  local buf = window.buf
  if buf and vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_clear_namespace(buf, H.ns, 0, -1)
    vim.api.nvim_buf_clear_namespace(buf, H.ns_rows, 0, -1)
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
  H.tail = (H.tail .. s):sub(-2)
end

--- Writes the queued text now, unless a batch of events is being handled (it writes at its end).
function M.write()
  if not H.batching then
    M.flush()
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

--- Writes the pending pieces with one nvim_buf_set_text at the end, then places their
--- highlights and row marks.
function M.flush()
  if #H.pending == 0 then
    return
  end
  local pieces = H.pending
  H.pending = {}
  local buf = window.buf
  local texts = {}
  for i, piece in ipairs(pieces) do
    texts[i] = piece.text
  end
  local lines = vim.split(table.concat(texts), "\n", { plain = true })
  local followers = H.followers()
  H.check_end()
  H.modify(function()
    vim.api.nvim_buf_set_text(buf, H.end_row, H.end_col, H.end_row, H.end_col, lines)
  end)
  local row, col = H.end_row, H.end_col
  for _, piece in ipairs(pieces) do
    local start_row, start_col = row, col
    local newlines, last = 0, nil
    local from = 1
    while true do
      local at = piece.text:find("\n", from, true)
      if not at then
        break
      end
      newlines, last, from = newlines + 1, at, at + 1
    end
    if newlines == 0 then
      col = col + #piece.text
    else
      row, col = row + newlines, #piece.text - last
    end
    if piece.hl then
      vim.api.nvim_buf_set_extmark(buf, H.ns, start_row, start_col, {
        end_row = row,
        end_col = col,
        hl_group = piece.hl,
      })
    end
    local tool = piece.tool and M.tools[piece.tool]
    if tool then
      tool.mark = vim.api.nvim_buf_set_extmark(buf, H.ns_rows, start_row, 0, {})
    end
  end
  H.end_row, H.end_col = row, col
  H.follow(followers)
end

--- The row a tool's (or block's) line is on now, or nil when it was never written.
---@return integer?
function M.row_of(tool)
  if not tool.mark then
    return nil
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(window.buf, H.ns_rows, tool.mark, {})
  return pos[1]
end

--- Rewrites a tool's row (one line, at `row`) as `s`, followed by the approval decision if there
--- was one, and puts `output` below it (replacing what was there), folded with the row unless
--- `opts.fold` is false. One buffer call.
---@param opts? { fold?: boolean, output_hl?: string }
function M.write_row(tool, row, s, hl, output, opts)
  opts = opts or {}
  local buf = window.buf
  if tool.note then
    s = s .. " · " .. tool.note
  end
  local lines = { s }
  for _, line in ipairs(output) do
    lines[#lines + 1] = line
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
    tool.folded = opts.fold ~= false
    if tool.folded then
      for _, win in ipairs(window.chat_windows()) do
        H.fold(win, row, #output)
      end
    end
  end
  H.follow(followers)
end

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
  local lines = {}
  for _, line in ipairs(text.lines(output)) do
    lines[#lines + 1] = line == "" and "" or ("  " .. line)
  end
  return lines
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
    local row = (tool.lines or 0) > 0 and tool.folded ~= false and M.row_of(tool)
    if row then
      H.fold(win, row, tool.lines)
    end
  end
end

-- Helpers ------------------------------------------------------------------------------------

function H.forget()
  H.pending, M.tools = {}, {}
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
  for _, win in ipairs(windows) do
    pcall(vim.api.nvim_win_set_cursor, win, { last, 0 })
  end
end

-- Deletes the fold on a row (before its output is rewritten).
function H.unfold(win, row)
  pcall(vim.api.nvim_win_call, win, function()
    local view = vim.fn.winsaveview()
    vim.api.nvim_win_set_cursor(0, { row + 1, 0 })
    vim.cmd("silent! normal! zD")
    vim.fn.winrestview(view)
  end)
end

-- Folds a tool's row with its output, closed: the closed fold shows the row ('foldtext' empty).
function H.fold(win, row, lines)
  pcall(vim.api.nvim_win_call, win, function()
    vim.cmd(("%d,%dfold"):format(row + 1, row + 1 + lines))
    vim.cmd(("silent! %dfoldclose"):format(row + 1))
  end)
end

return M
