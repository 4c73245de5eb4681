--- Text helpers the Lua modules share. What a person is shown was made visible by the backend
--- already (crates/text/src/escape.rs); these only lay it out.

local M = {}
local H = {}

--- The most bytes one unit of `M.cut` can have (`[… 12345678 blank characters …]` is 40).
H.MAX_UNIT_BYTES = 64

--- The length in bytes of the unit at byte `at` of `text` that a cut keeps whole: an escape
--- the backend wrote (`\e`, `\u{202e}`), a marker (`[… 60 blank lines …]`), or else one
--- character. The same units as crates/text/src/escape.rs's `cut`. Reads only the unit: `text` may be
--- megabytes long.
---@param text string
---@param at integer
---@return integer
function H.unit_len(text, at)
  local hex = text:match("^\\u{(%x+)}", at)
  if hex then
    return #hex + 4
  end
  if text:match("^\\[0tnre]", at) then
    return 2
  end
  local marker = text:match("^%[… %d+ blank lines …%]", at)
    or text:match("^%[… %d+ spaces …%]", at)
    or text:match("^%[… %d+ blank characters …%]", at)
  if marker then
    return #marker
  end
  local char = vim.fn.strcharpart(text:sub(at, at + 3), 0, 1)
  return math.max(#char, 1)
end

--- `text` (a line the backend made visible) cut to at most `max` characters, the last of which
--- is `…` when anything was cut. The cut falls between escapes and markers, never inside one:
--- half an escape (`\u{2…`) would read as something else.
--- With `cells`, `max` counts screen cells (a wide character two), not characters.
--- Only the first `max + 1` units are ever looked at, so a 50 MB text costs what a short one
--- does (the status line cuts the running command every second).
---@param text string
---@param max integer
---@param cells? boolean
---@return string
function M.cut(text, max, cells)
  local measure = cells and vim.fn.strdisplaywidth or vim.fn.strchars
  local room = (max + 1) * H.MAX_UNIT_BYTES
  local head = #text > room and text:sub(1, room) or text
  if #head == #text and measure(text) <= max then
    return text
  end
  local out, used, at = {}, 0, 1
  while at <= #head do
    local len = H.unit_len(head, at)
    local unit = head:sub(at, at + len - 1)
    local n = measure(unit)
    if used + n + 1 > max then
      break
    end
    out[#out + 1] = unit
    used = used + n
    at = at + len
  end
  return table.concat(out) .. "…"
end

--- `s` split at every newline: vim.split(s, "\n", { plain = true }), at a fraction of its cost
--- (a resumed chat splits megabytes).
---@param s string
---@return string[]
function M.split(s)
  local find, sub = string.find, string.sub
  local lines, n, from = {}, 0, 1
  while true do
    local at = find(s, "\n", from, true)
    if not at then
      break
    end
    n = n + 1
    lines[n] = sub(s, from, at - 1)
    from = at + 1
  end
  lines[n + 1] = sub(s, from)
  return lines
end

--- The lines of a tool's output, CRLF as LF, trailing empty lines dropped; nothing for a
--- non-string or empty output. With `indent`, every line that is not empty starts with it.
---@param output any
---@param indent? string
---@return string[]
function M.lines(output, indent)
  if type(output) ~= "string" or output == "" then
    return {}
  end
  if output:find("\r\n", 1, true) then
    output = output:gsub("\r\n", "\n") -- only then: a gsub over a resumed chat's outputs is slow
  end
  local lines = M.split(output)
  local n = #lines
  while n > 0 and lines[n] == "" do
    lines[n] = nil
    n = n - 1
  end
  if indent then
    for i = 1, n do
      local line = lines[i]
      if line ~= "" then
        lines[i] = indent .. line
      end
    end
  end
  return lines
end

--- Reads buffer `buf`'s lines numbered in `order` (the first is kept whatever it costs, cut to
--- the budget), each as `12: text`, until `budget` characters are used: what an ask and an
--- inline edit send about some lines. Returns them by number, the first and last number taken
--- (a contiguous run), and whether anything was left out.
---@param buf integer
---@param order integer[]
---@param budget integer
---@return table<integer, string> taken
---@return integer first
---@return integer last
---@return boolean cut
function M.take_lines(buf, order, budget)
  local taken, left = {}, budget
  local first, last = order[1], order[1]
  local cut = false
  for _, n in ipairs(order) do
    if left <= 0 then
      cut = true
      break
    end
    local text = ("%d: %s"):format(n, vim.api.nvim_buf_get_lines(buf, n - 1, n, false)[1] or "")
    local chars = vim.fn.strchars(text) + 1
    if chars > left then
      text = vim.fn.strcharpart(text, 0, math.max(0, left - 1))
      cut = true
    end
    taken[n] = text
    left = left - chars
    first, last = math.min(first, n), math.max(last, n)
  end
  -- A line left out in the middle would leave a gap: keep the run from the first line on.
  for n = first, last do
    if not taken[n] then
      last = n - 1
      break
    end
  end
  return taken, first, last, cut
end

--- Asks for a line of text (`vim.ui.input`, with `prompt`) and calls `answered(text)` with
--- it, unless it is blank or the question was dismissed: what a command run without its text
--- does (an inline edit's instruction, a side question).
---@param prompt string
---@param answered fun(text: string)
function M.ask_for(prompt, answered)
  vim.ui.input({ prompt = prompt }, function(text)
    if text and vim.trim(text) ~= "" then
      answered(text)
    end
  end)
end

return M
