--- When the person last typed a key outside the approval picker (and an agent's question): a question that arrives soon
--- after does not take their focus (lua/agent/approval.lua). Watched from setup(), so the
--- first question already knows.

local M = {}

--- `vim.uv.now()` of the last key typed outside the picker; nil before any.
---@type integer?
M.last = nil

--- Whether the person is typing: in Insert, Replace, Terminal or Command-line mode, or a key
--- was typed outside the questions in the last `approval.typing` ms. A question that arrives
--- then is shown without taking focus.
---@return boolean
function M.typing()
  local mode = vim.api.nvim_get_mode().mode:sub(1, 1)
  if mode == "i" or mode == "R" or mode == "c" or mode == "t" then
    return true
  end
  local window = require("agent.config").options.approval.typing
  return M.last ~= nil and vim.uv.now() - M.last < window
end

--- Starts watching the keys typed (once).
function M.watch()
  if M.watching then
    return
  end
  M.watching = true
  vim.on_key(function(_, typed)
    -- Only keys the person typed (not those a mapping made), and not the picker's own.
    local filetype = vim.bo.filetype
    if typed == nil or typed == "" or filetype == "agent-approval" or filetype == "agent-elicit" then
      return
    end
    M.last = vim.uv.now()
  end, vim.api.nvim_create_namespace("agent.keys"))
end

return M
