--- The chat's closed folds ('foldtext'), a module of its own so the chat window can name it
--- without requiring the renderer, which requires the window.

local text = require("agent.text")

local M = {}

-- The renderer's highlight namespace: the same name gives the same namespace.
local NS = vim.api.nvim_create_namespace("agent.chat")

--- What a closed fold in the chat shows ('foldtext'): its first line (a row) in the row's own
--- highlight; a row too wide for the window keeps its result whole (` -> exit 3 · allowed
--- once`) and loses the middle of what comes before it, so a narrow chat still shows how a
--- command ended.
---@return string|table
function M.foldtext()
  local row = vim.v.foldstart - 1
  local buf = vim.api.nvim_get_current_buf()
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
  local hl = "Folded" -- a fold of the person's own (zf) looks as any fold does
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, NS, { row, 0 }, { row, 0 }, { details = true })) do
    hl = mark[4].hl_group or hl
  end
  local win = vim.api.nvim_get_current_win()
  local width = vim.api.nvim_win_get_width(win) - (vim.fn.getwininfo(win)[1] or { textoff = 0 }).textoff
  if vim.fn.strdisplaywidth(line) > width then
    local at = line:find(" %-> [^>]*$")
    local tail = at and line:sub(at) or ""
    local room = width - vim.fn.strdisplaywidth(tail)
    if at and room >= 12 then
      line = text.cut(vim.fn.strcharpart(line:sub(1, at - 1), 0, room + 1), room, true) .. tail
    end
  end
  return { { line, hl } }
end

return M
