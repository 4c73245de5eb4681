--- The backend's questions about buffers (protocol.rs `lua`): whether one holds a file and has
--- unsaved changes, its text, and re-reading files the backend changed. Paths come resolved
--- (absolute, symlinks resolved, checked to be inside the workspace).

local M = {}
local H = {}

--- What Rust needs to know before touching `path`.
---@param path string
---@return { loaded: boolean, modified: boolean }
function M.buffer_state(path)
  local buf = H.find_buffer(path)
  if not buf then
    return { loaded = false, modified = false }
  end
  local loaded = vim.api.nvim_buf_is_loaded(buf)
  return { loaded = loaded, modified = loaded and vim.bo[buf].modified }
end

--- The text of the loaded buffer holding `path` (what an external agent reads through ACP's
--- fs/read_text_file, unsaved changes included), or nil when no buffer holds it.
---@param path string
---@return string?
function M.buffer_text(path)
  local buf = H.find_buffer(path)
  if not buf or not vim.api.nvim_buf_is_loaded(buf) then
    return nil
  end
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
  if vim.bo[buf].eol or vim.bo[buf].fixeol then
    text = text .. "\n"
  end
  return text
end

--- Re-reads `path` into its buffer after the backend wrote it, when the buffer is loaded and
--- has no unsaved changes. The reload can be undone (u), like any change.
---@param path string
---@return boolean reloaded
function M.reload(path)
  local buf = H.find_buffer(path)
  if not buf or not vim.api.nvim_buf_is_loaded(buf) or vim.bo[buf].modified then
    return false
  end
  if not vim.uv.fs_stat(path) then
    return false
  end
  local windows = vim.fn.win_findbuf(buf)
  local views = {}
  for _, win in ipairs(windows) do
    views[win] = vim.api.nvim_win_call(win, vim.fn.winsaveview)
  end
  local function edit()
    -- `:edit` on an unmodified buffer re-reads it, saving the old text for undo ('undoreload').
    vim.cmd("silent keepalt keepjumps edit")
  end
  local ok, err
  if windows[1] then
    ok, err = pcall(vim.api.nvim_win_call, windows[1], edit)
  else
    ok, err = pcall(vim.api.nvim_buf_call, buf, edit)
  end
  for win, view in pairs(views) do
    if vim.api.nvim_win_is_valid(win) then
      pcall(vim.api.nvim_win_call, win, function()
        vim.fn.winrestview(view)
      end)
    end
  end
  if not ok then
    vim.notify(("agent: could not reload %s: %s"):format(path, err), vim.log.levels.WARN)
  end
  return ok
end

--- Re-reads every loaded buffer without unsaved changes whose file changed on disk (after a
--- command ran). Buffers with unsaved changes are left alone, without a prompt.
function M.checktime()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if
      vim.api.nvim_buf_is_loaded(buf)
      and vim.bo[buf].buftype == ""
      and not vim.bo[buf].modified
      and vim.api.nvim_buf_get_name(buf) ~= ""
    then
      -- With 'autoread' on for this one check, a changed file is re-read without asking.
      pcall(vim.api.nvim_buf_call, buf, function()
        vim.cmd("setlocal autoread")
        pcall(vim.cmd.checktime, buf)
        vim.cmd("set autoread<")
      end)
    end
  end
end

-- Helpers ------------------------------------------------------------------------------------

function H.real(path)
  return vim.uv.fs_realpath(path) or vim.fn.resolve(path)
end

-- The buffer holding the file `path`, which the backend has resolved already (absolute, symlinks
-- resolved, checked to be inside the workspace). `path` is not resolved again: a directory
-- swapped for a link since would lead to a buffer of a file outside. A buffer's own name is
-- resolved, so a buffer opened through a link still matches.
function H.find_buffer(path)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local name = vim.api.nvim_buf_get_name(buf)
    if name ~= "" and vim.bo[buf].buftype == "" then
      local full = vim.fn.fnamemodify(name, ":p")
      if full == path or H.real(full) == path then
        return buf
      end
    end
  end
  return nil
end

return M
