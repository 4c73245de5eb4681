--- An nvim-cmp source for the chat's input: `@` files, `#` context, `/` commands (the same
--- completion as the built-in one, agent.context). Register it, then name it for the input:
---   require("cmp").register_source("agent", require("agent.cmp.nvim_cmp").new())
---   require("cmp").setup.filetype("markdown", { sources = { { name = "agent" }, ... } })

local shared = require("agent.cmp.shared")

local M = {}
M.__index = M

--- A source.
---@return table
function M.new()
  return setmetatable({}, M)
end

--- Only in the chat's input.
---@return boolean
function M:is_available()
  return shared.in_input(0)
end

--- The items' text edits count columns in bytes (nvim-cmp's default is UTF-16).
---@return string
function M:get_position_encoding_kind()
  return "utf-8"
end

---@return string[]
function M:get_trigger_characters()
  return { "@", "#", "/" }
end

--- The word being completed: from the trigger to the cursor (paths hold `/` and `.`).
---@return string
function M:get_keyword_pattern()
  return [[\%(@\|#\|/\)\S*]]
end

--- Answers `callback` with the items at the cursor of `params.context` (row and col 1-based).
--- Incomplete: the files are ranked again as one types.
---@param params table
---@param callback fun(response: table)
function M:complete(params, callback)
  local context = params.context
  local row, col = context.cursor.row - 1, context.cursor.col - 1
  shared.items(context.cursor_line, row, col, function(items)
    callback({ items = items, isIncomplete = true })
  end)
end

return M
