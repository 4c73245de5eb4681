--- Follow mode (|agent-follow|): the editor shows what the agent works on. A file it read opens
--- at the top, an edit it made opens at the first changed line with the change highlighted for
--- a moment, in the last window the person used that is not the chat's, and never in the window
--- the cursor is in: following the agent moves no cursor of the person's.
---
--- Only regular files inside the workspace are opened (a FIFO would block Neovim on its read, a
--- link out of the workspace is not the agent's to show), and only files of at most max_edit_mb;
--- a window whose buffer has unsaved changes is never used.

local M = {}
local H = {}

H.ns = vim.api.nvim_create_namespace("agent.follow")
H.last_win = nil -- the last window entered that is not the chat's, the input's or a float
--- How long an edit's lines stay highlighted, in milliseconds.
M.FLASH_MS = 1500

--- True while follow mode is on.
---@return boolean
function M.enabled()
  return require("agent.config").options.follow == true
end

--- Turns follow mode on or off (`:Agent follow`), and says which.
---@param on? boolean nil: the other way
function M.toggle(on)
  local options = require("agent.config").options
  if on == nil then
    on = not options.follow
  end
  options.follow = on
  vim.notify(on and "agent: follow on: files the agent reads and edits open in the other window" or "agent: follow off")
end

--- Remembers `win` as the last window the person was in, unless it is one of the agent's.
---@param win integer
function M.entered(win)
  if H.usable(win, true) then
    H.last_win = win
  end
end

--- Shows `path` (absolute, or relative to `root`) in the follow window with `line` (1-based)
--- at the top; highlights `count` lines from it for a moment when `count` is given (an edit).
--- Does nothing when follow mode is off, the file is not a regular file inside `root`, no
--- window other than the person's own can show it, or the conversation at work is not the one
--- the current tab page shows (another's work does not open files where the person is).
---@param root? string the workspace root
---@param path string
---@param line? integer
---@param count? integer
---@return boolean shown
function M.show(root, path, line, count)
  if not M.enabled() or type(path) ~= "string" or path == "" or not root or root == "" then
    return false
  end
  local conversations = require("agent.conversations")
  if conversations.in_tab() ~= conversations.active() then
    return false
  end
  local abs = H.inside(root, path)
  local win = abs and H.window()
  if not win then
    return false
  end
  -- bufadd() finds a buffer by name or by inode (a hard link): any buffer that was there
  -- before is the person's, never wiped here.
  local newest = H.newest_buffer()
  local buf = vim.fn.bufadd(abs)
  local existing = buf <= newest and buf or nil
  if not vim.api.nvim_buf_is_loaded(buf) and not (H.still_a_file(abs) and pcall(vim.fn.bufload, buf)) then
    return H.forget(buf, existing)
  end
  if vim.api.nvim_win_get_buf(win) ~= buf and not pcall(vim.api.nvim_win_set_buf, win, buf) then
    return H.forget(buf, existing)
  end
  vim.bo[buf].buflisted = true
  local last = vim.api.nvim_buf_line_count(buf)
  line = math.max(1, math.min(tonumber(line) or 1, last))
  vim.api.nvim_win_set_cursor(win, { line, 0 })
  vim.api.nvim_win_call(win, function()
    vim.cmd("normal! zt")
  end)
  if count then
    H.flash(buf, line, math.max(1, count))
  end
  return true
end

--- The first changed line of a unified diff's new side and how many lines were added there (at
--- least 1: a deletion is shown at the line after it).
---@param diff? string
---@return integer? line
---@return integer count
function M.first_change(diff)
  if type(diff) ~= "string" then
    return nil, 1
  end
  local line, count
  for text in vim.gsplit(diff, "\n", { plain = true }) do
    local start = text:match("^@@ %-%d+,?%d* %+(%d+),?%d* @@")
    if start then
      if count then
        break
      end
      line = tonumber(start)
    elseif line then
      local mark = text:sub(1, 1)
      if mark == "+" then
        count = (count or 0) + 1
      elseif mark == "-" then
        count = count or 0
      elseif count then
        break -- the first change has ended
      elseif mark == " " then
        line = line + 1
      end
    end
  end
  if not line then
    return nil, 1
  end
  return math.max(line, 1), math.max(count or 1, 1)
end

-- Helpers ------------------------------------------------------------------------------------

-- A window the person edits in: a normal window (not a float) that shows neither the chat nor
-- the input, nor a special buffer (help, quickfix, terminal, a scratch one); nor, unless
-- `modified_too`, a buffer with unsaved changes.
function H.usable(win, modified_too)
  if not (win and vim.api.nvim_win_is_valid(win)) then
    return false
  end
  if vim.api.nvim_win_get_config(win).relative ~= "" then
    return false
  end
  local window = require("agent.chat.window")
  local buf = vim.api.nvim_win_get_buf(win)
  if buf == window.buf or buf == window.input_buf then
    return false
  end
  -- A buffer with unsaved changes is never replaced: with 'autowrite' that would write it, with
  -- 'confirm' ask about it, with 'nohidden' fail.
  return vim.bo[buf].buftype == "" and (modified_too or not vim.bo[buf].modified)
end

-- The window to follow in: the last usable one entered, else any usable one in this tab page;
-- never the current window (the person's cursor is there).
function H.window()
  local current = vim.api.nvim_get_current_win()
  local tab = vim.api.nvim_get_current_tabpage()
  local last = H.last_win
  if last and last ~= current and H.usable(last) and vim.api.nvim_win_get_tabpage(last) == tab then
    return last
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(tab)) do
    if win ~= current and H.usable(win) then
      return win
    end
  end
  return nil
end

-- `path` made absolute against `root`, when it is a regular file inside `root` (links
-- resolved) of at most max_edit_mb; nil otherwise.
function H.inside(root, path)
  local abs = path:sub(1, 1) == "/" and path or vim.fs.joinpath(root, path)
  local real, real_root = vim.uv.fs_realpath(abs), vim.uv.fs_realpath(root)
  if not (real and real_root and require("agent.paths").within(real, real_root)) then
    return nil
  end
  return H.small_file(vim.uv.fs_stat(real)) and real or nil
end

-- True for the stat of a regular file of at most max_edit_mb.
function H.small_file(stat)
  local limit = (require("agent.config").options.max_edit_mb or 64) * 1024 * 1024
  return stat ~= nil and stat.type == "file" and stat.size <= limit
end

-- Checked again just before Neovim reads it, for a file swapped since H.inside (a FIFO renamed
-- over it would block Neovim's read until something writes to it): the file opened without
-- blocking (O_NONBLOCK: a FIFO's open returns at once) is a small regular file, and the name
-- still names that same file. What is left is the instant between this and the read.
function H.still_a_file(abs)
  local c = vim.uv.constants
  -- (Distinct bits, O_RDONLY being 0: their sum is their union.)
  local fd = vim.uv.fs_open(abs, c.O_RDONLY + c.O_NONBLOCK + c.O_NOCTTY, 0)
  if not fd then
    return false
  end
  -- lstat: `abs` is a real path, so a link there now was swapped in.
  local opened, named = vim.uv.fs_fstat(fd), vim.uv.fs_lstat(abs)
  vim.uv.fs_close(fd)
  return H.small_file(opened) and H.small_file(named) and opened.ino == named.ino and opened.dev == named.dev
end

-- The highest buffer number in use (buffer numbers only grow).
function H.newest_buffer()
  local newest = 0
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    newest = math.max(newest, buf)
  end
  return newest
end

-- A buffer follow made for nothing is wiped again (one that was there before is left alone).
function H.forget(buf, existing)
  if not existing and vim.api.nvim_buf_is_valid(buf) then
    pcall(vim.api.nvim_buf_delete, buf, { force = true })
  end
  return false
end

-- Highlights `count` lines of `buf` from `line` for FLASH_MS.
function H.flash(buf, line, count)
  vim.api.nvim_buf_clear_namespace(buf, H.ns, 0, -1)
  local last = math.min(line + count - 1, vim.api.nvim_buf_line_count(buf))
  vim.api.nvim_buf_set_extmark(buf, H.ns, line - 1, 0, {
    end_row = last,
    end_col = 0,
    hl_group = "AgentFollowed",
    hl_eol = true,
  })
  vim.defer_fn(function()
    if vim.api.nvim_buf_is_valid(buf) then
      vim.api.nvim_buf_clear_namespace(buf, H.ns, 0, -1)
    end
  end, M.FLASH_MS)
end

return M
