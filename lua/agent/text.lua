--- Text helpers the Lua modules share. What a person is shown was made visible by the backend
--- already (src/display.rs); these only lay it out.

local M = {}

--- `text` on one line: each newline, with the blanks around it, becomes one space.
---@param text any
---@return string
function M.one_line(text)
  return (tostring(text):gsub("%s*\n%s*", " "))
end

--- `text` cut to at most `max` characters, the last of which is `…` when anything was cut.
---@param text string
---@param max integer
---@return string
function M.cut(text, max)
  if vim.fn.strchars(text) <= max then
    return text
  end
  return vim.fn.strcharpart(text, 0, max - 1) .. "…"
end

--- The lines of a tool's output, CRLF as LF, trailing empty lines dropped; nothing for a
--- non-string or empty output.
---@param output any
---@return string[]
function M.lines(output)
  if type(output) ~= "string" or output == "" then
    return {}
  end
  local lines = vim.split(output:gsub("\r\n", "\n"), "\n", { plain = true })
  while #lines > 0 and lines[#lines] == "" do
    lines[#lines] = nil
  end
  return lines
end

return M
