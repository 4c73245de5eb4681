--- The clipboard's image (:help agent-images): which tool reads it here, and pasting it into
--- the chat's input. (`xsel` is not one: it prints the clipboard's text only.) The backend runs the tool (with a time limit) and reads, checks and
--- scales the image; this only picks the tool, so `:checkhealth agent` can say which.

local M = {}
local H = {}

--- The tools tried, in order, each with the arguments that print the clipboard's image.
--- Wayland's and X11's come first where their display is set.
H.TOOLS = {
  { name = "wl-paste", args = { "--no-newline", "--type", "image/png" }, display = "WAYLAND_DISPLAY" },
  { name = "xclip", args = { "-selection", "clipboard", "-target", "image/png", "-out" }, display = "DISPLAY" },
  { name = "pngpaste", args = { "-" } },
  { name = "osascript", args = { "-e", "the clipboard as «class PNGf»" } },
}

--- The command that prints the clipboard's image: `images.clipboard` from setup() when set,
--- else the first tool of H.TOOLS found (one whose display is set first). Nil, and why, when
--- there is none.
---@return string[]? argv its program as a full path
---@return string? why
function M.command()
  local configured = require("agent.config").options.images.clipboard
  if configured then
    local path = vim.fn.exepath(configured[1])
    if path == "" then
      return nil, ("images.clipboard names %s, which is not on PATH"):format(configured[1])
    end
    return vim.list_extend({ path }, vim.list_slice(configured, 2))
  end
  local found
  for pass = 1, 2 do
    for _, tool in ipairs(H.TOOLS) do
      local fits = pass == 2 or (tool.display and vim.env[tool.display] ~= nil and vim.env[tool.display] ~= "")
      local path = fits and vim.fn.exepath(tool.name) or ""
      if path ~= "" and not found then
        found = vim.list_extend({ path }, tool.args)
      end
    end
  end
  if found then
    return found
  end
  local names = vim.tbl_map(function(tool)
    return tool.name
  end, H.TOOLS)
  return nil, ("no clipboard tool found (install one of %s, or set images.clipboard)"):format(table.concat(names, ", "))
end

--- Reads the clipboard's image now and puts `#image:N` at the cursor of `buf`'s window (the
--- backend holds the image under N until the prompt goes). Says why when there is none.
---@param buf integer the chat's input
function M.paste(buf)
  local argv, why = M.command()
  if not argv then
    vim.notify("agent: " .. why, vim.log.levels.WARN)
    return
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local answers, err = rpc.attach({ { clipboard = argv } })
  local answer = answers and answers[1]
  if not answer or not answer.image then
    local reason = err or (answer and answer.problem) or "nothing came back"
    vim.notify(("agent: no image pasted: %s"):format(reason), vim.log.levels.WARN)
    return
  end
  H.insert(buf, ("#image:%d"):format(answer.image))
  vim.notify(("agent: pasted %s"):format(answer.label), vim.log.levels.INFO)
end

--- `text` with each `#clipboard` replaced by `#image:N` for the clipboard's image as it is now
--- (a prompt queued behind a running turn is expanded only when it goes, and must send what
--- the person saw when they sent it). Left as it is when the clipboard holds no image (its
--- expansion says why).
---@param text string
---@return string
function M.pin(text)
  if not text:find("#clipboard", 1, true) then
    return text
  end
  local argv = M.command()
  local answers = argv and require("agent.rpc").attach({ { clipboard = argv } })
  local answer = answers and answers[1]
  if not (answer and answer.image) then
    return text
  end
  local word = ("#image:%d"):format(answer.image)
  return (text:gsub("#clipboard%f[^%w_]", word))
end

-- Puts `word` at the cursor of the window showing `buf`, a blank before and after it.
function H.insert(buf, word)
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    return
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  local line = vim.api.nvim_buf_get_lines(buf, row - 1, row, false)[1] or ""
  local before = line:sub(1, col)
  local text = ((before == "" or before:match("%s$")) and "" or " ") .. word .. " "
  vim.api.nvim_buf_set_text(buf, row - 1, col, row - 1, col, { text })
  vim.api.nvim_win_set_cursor(win, { row, col + #text })
end

return M
