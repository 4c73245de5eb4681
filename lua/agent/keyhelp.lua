--- `?` in the chat, the input and the approval picker: a float listing the keys of that window,
--- read from its own buffer-local mappings (their `desc`), so what it says is what the keys do,
--- whatever the person remapped. `/help` lists the slash commands and the keys of the chat and
--- the input in the same float. `q`, `<Esc>` or `?` close it, and focus goes back.

local M = {}
local H = {}

H.ns = vim.api.nvim_create_namespace("agent.keyhelp")

--- The agent's mappings of `buf` in `modes`, as `{ lhs, what }` rows (the `agent: ` of their
--- descriptions left out), sorted by key, one row per key and mode set.
---@param buf integer
---@param modes string[]
---@return { [1]: string, [2]: string }[]
function M.keys(buf, modes)
  local rows, index = {}, {}
  for _, mode in ipairs(modes) do
    for _, map in ipairs(vim.api.nvim_buf_get_keymap(buf, mode)) do
      local what = map.desc and map.desc:match("^agent: (.*)")
      if what then
        local lhs = vim.fn.keytrans(vim.api.nvim_replace_termcodes(map.lhs, true, true, true))
        local key = lhs .. "\0" .. what
        if index[key] then
          index[key][3][mode] = true
        else
          local row = { lhs, what, { [mode] = true } }
          index[key] = row
          rows[#rows + 1] = row
        end
      end
    end
  end
  table.sort(rows, function(a, b)
    return a[1]:lower() < b[1]:lower()
  end)
  local shown = {}
  for _, row in ipairs(rows) do
    local lhs = row[1]
    if #modes > 1 and not row[3].n then
      lhs = lhs .. " (insert)"
    elseif #modes > 1 and row[3].i then
      lhs = lhs .. " (also insert)"
    end
    shown[#shown + 1] = { lhs, row[2] }
  end
  return shown
end

--- The lines of a section: its title, then each row with the keys in a column.
---@param title string
---@param rows { [1]: string, [2]: string }[]
---@return string[]
function M.section(title, rows)
  local width = 0
  for _, row in ipairs(rows) do
    width = math.max(width, vim.fn.strdisplaywidth(row[1]))
  end
  local lines = { title }
  for _, row in ipairs(rows) do
    local pad = string.rep(" ", width - vim.fn.strdisplaywidth(row[1]))
    lines[#lines + 1] = ("  %s%s  %s"):format(row[1], pad, row[2])
  end
  if #rows == 0 then
    lines[#lines + 1] = "  (none)"
  end
  return lines
end

--- Shows the keys of `buf` (the window the person is in) in a float; `title` names the window.
---@param buf integer
---@param title string
---@param modes? string[] default { "n" }
function M.show(buf, title, modes)
  M.open(M.section(("Keys in the %s"):format(title), M.keys(buf, modes or { "n" })))
end

--- Opens the float holding `lines` (section titles are the lines that do not start with a
--- blank), with focus; closing it puts the cursor back where it was.
---@param lines string[]
function M.open(lines)
  M.close()
  lines = vim.list_extend(vim.list_extend({}, lines), { "", "q, <Esc> or ? closes this · :help agent" })
  local origin = vim.api.nvim_get_current_win()
  local mode = vim.api.nvim_get_mode().mode:sub(1, 1)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "agent-keys"
  for i, line in ipairs(lines) do
    if line ~= "" and not line:match("^%s") then
      vim.api.nvim_buf_set_extmark(buf, H.ns, i - 1, 0, { end_col = #line, hl_group = "Title" })
    end
  end
  local width = 0
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  local win = require("agent.float").centered(buf, {
    width = math.max(20, width + 2),
    height = #lines,
    title = " agent: keys ",
    zindex = 70,
  })
  if mode == "i" then
    vim.cmd.stopinsert()
  end
  H.open = { win = win, origin = origin, mode = mode }
  for _, lhs in ipairs({ "q", "<Esc>", "?" }) do
    vim.keymap.set("n", lhs, function()
      M.close()
    end, { buffer = buf, nowait = true, desc = "agent: close this list" })
  end
  -- Left some other way (a question took focus, a click): closed where the cursor went.
  vim.api.nvim_create_autocmd("WinLeave", {
    buffer = buf,
    once = true,
    callback = function()
      vim.schedule(function()
        M.close(false)
      end)
    end,
  })
end

--- Closes the float and, unless `back` is false, puts the cursor back in the window (and mode)
--- it was opened from.
---@param back? boolean
function M.close(back)
  local open = H.open
  if not open then
    return
  end
  H.open = nil
  if vim.api.nvim_win_is_valid(open.win) then
    pcall(vim.api.nvim_win_close, open.win, true)
  end
  if back ~= false and vim.api.nvim_win_is_valid(open.origin) then
    pcall(vim.api.nvim_set_current_win, open.origin)
    if open.mode == "i" then
      vim.cmd.startinsert({ bang = true })
    end
  end
end

return M
