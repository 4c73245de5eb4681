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
    local name = vim.api.nvim_buf_get_name(buf)
    local file = vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == "" and name ~= ""
    local on_disk = file and vim.uv.fs_stat(name) ~= nil
    if file and not on_disk then
      -- Only a file that was there: a buffer for a file not yet written is no loss.
      if vim.b[buf].agent_on_disk then
        H.gone(buf, name)
      end
    elseif on_disk then
      vim.b[buf].agent_on_disk = true
    end
    if on_disk and not vim.bo[buf].modified then
      H.back(buf)
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

H.group = vim.api.nvim_create_augroup("agent.buffers.gone", { clear = true })

--- Notes which buffers hold a file that is on disk (read or written), so that one deleted later
--- is told apart from a file not written yet. Called once, from require("agent")'s autocommands.
function M.watch()
  -- Those read before (the plugin loaded late): on disk now, so deleted later counts.
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local name = vim.api.nvim_buf_get_name(buf)
    if vim.api.nvim_buf_is_loaded(buf) and vim.bo[buf].buftype == "" and name ~= "" and vim.uv.fs_stat(name) then
      vim.b[buf].agent_on_disk = true
    end
  end
  vim.api.nvim_create_autocmd({ "BufReadPost", "BufWritePost" }, {
    group = vim.api.nvim_create_augroup("agent.buffers.on_disk", { clear = true }),
    desc = "agent: this buffer's file is on disk",
    callback = function(args)
      if vim.bo[args.buf].buftype == "" then
        vim.b[args.buf].agent_on_disk = true
      end
    end,
  })
end

-- `buf`'s file is there again: Neovim's own checks apply to it again.
function H.back(buf)
  if vim.api.nvim_buf_is_valid(buf) and vim.b[buf].agent_gone then
    vim.b[buf].agent_gone = nil
    vim.api.nvim_clear_autocmds({ group = H.group, buffer = buf })
  end
end

-- The file of `buf` was deleted (by a command, or a rewind to before it was made): the buffer
-- keeps its text, and the person is told once, in our words, instead of Neovim's `E211: File
-- ... no longer available` at every check. Writing it (or the file coming back) ends that.
function H.gone(buf, name)
  if vim.b[buf].agent_gone then
    return
  end
  vim.b[buf].agent_gone = true
  local function back()
    H.back(buf)
  end
  vim.api.nvim_create_autocmd("FileChangedShell", {
    group = H.group,
    buffer = buf,
    desc = "agent: a deleted file's buffer is kept without E211",
    callback = function()
      if vim.v.fcs_reason == "deleted" then
        vim.v.fcs_choice = ""
      else
        -- Back on disk: read again unless the person changed the buffer (then Neovim asks).
        back()
        vim.v.fcs_choice = vim.bo[buf].modified and "ask" or "reload"
      end
    end,
  })
  vim.api.nvim_create_autocmd("BufWritePost", {
    group = H.group,
    buffer = buf,
    desc = "agent: a deleted file written back",
    callback = back,
  })
  -- Made visible: a name is anybody's (a file the model made), control characters included.
  local shown = vim.fn.strtrans(vim.fn.fnamemodify(name, ":~:."))
  require("agent.chat").say(
    ("agent: %s no longer exists on disk; its buffer keeps the text (:w writes it back, :bdelete closes it)"):format(
      shown
    ),
    vim.log.levels.WARN
  )
end

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
