--- When the person last typed a key outside the approval picker: a question that arrives soon
--- after does not take their focus (lua/agent/approval.lua). Watched from setup(), so the
--- first question already knows.

local M = {}

--- `vim.uv.now()` of the last key typed outside the picker; nil before any.
---@type integer?
M.last = nil

--- Starts watching the keys typed (once).
function M.watch()
  if M.watching then
    return
  end
  M.watching = true
  vim.on_key(function(_, typed)
    -- Only keys the person typed (not those a mapping made), and not the picker's own.
    if typed == nil or typed == "" or vim.bo.filetype == "agent-approval" then
      return
    end
    M.last = vim.uv.now()
  end, vim.api.nvim_create_namespace("agent.keys"))
end

return M
