--- What the blink.cmp and nvim-cmp sources share: the chat input's completion (agent.context)
--- as LSP completion items. Neither plugin is required here.

local M = {}

--- LSP CompletionItemKind numbers (the protocol's, which both plugins take).
M.kinds = { file = 17, context = 6, command = 14 }

--- True in the chat's input buffer, the only place the sources complete.
---@param buf? integer
---@return boolean
function M.in_input(buf)
  local input = require("agent.chat.window").input_buf
  if not buf or buf == 0 then
    buf = vim.api.nvim_get_current_buf()
  end
  return input ~= nil and buf == input
end

--- Calls `done(items)` with the items for the cursor at byte column `col` (0-based) of `line`,
--- the row being `row` (0-based), each replacing the word being completed: an empty list when
--- there is nothing to complete. `@` files come when the backend has found them (a query a
--- later one replaced is never answered).
---@param line string
---@param row integer
---@param col integer
---@param done fun(items: table[])
function M.items(line, row, col, done)
  local asked = require("agent.context").complete(line:sub(1, col), row == 0, function(found)
    local items = {}
    for i, item in ipairs(found.items) do
      items[i] = {
        label = item.word,
        filterText = item.word,
        -- Best first, as the backend ranked the files.
        sortText = ("%05d"):format(i),
        kind = M.kinds[item.kind],
        detail = item.info,
        documentation = item.info,
        textEdit = {
          newText = item.word,
          range = {
            start = { line = row, character = found.start },
            ["end"] = { line = row, character = col },
          },
        },
      }
    end
    done(items)
  end)
  if not asked then
    done({})
  end
end

return M
