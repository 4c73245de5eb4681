--- A blink.cmp source for the chat's input: `@` files, `#` context, `/` commands (the same
--- completion as the built-in one, agent.context). In blink.cmp's setup:
---   sources = { default = { "agent", ... }, providers = {
---     agent = { name = "agent", module = "agent.cmp.blink" } } }

local shared = require("agent.cmp.shared")

local M = {}
M.__index = M

--- A source (blink.cmp calls it with the provider's `opts`).
---@return table
function M.new()
  return setmetatable({}, M)
end

--- Only in the chat's input.
---@return boolean
function M:enabled()
  return shared.in_input(0)
end

---@return string[]
function M:get_trigger_characters()
  return { "@", "#", "/" }
end

--- Answers `callback` with the items at the cursor of `ctx` (its `line` and `cursor`, row
--- 1-based, column 0-based). Incomplete both ways: the files are ranked again as one types.
---@param ctx table
---@param callback fun(response: table)
function M:get_completions(ctx, callback)
  local row, col = ctx.cursor[1] - 1, ctx.cursor[2]
  shared.items(ctx.line, row, col, function(items)
    callback({ items = items, is_incomplete_forward = true, is_incomplete_backward = true })
  end)
end

return M
