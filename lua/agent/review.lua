--- Reviewing what the agent changed (:Agent diff, :help agent-diff): the files changed since a
--- checkpoint go to the quickfix list; <CR> on one of its entries opens a diff of the file as the
--- checkpoint had it (a read-only scratch buffer, `agent://checkpoint/<id>/<path>`) against the
--- file as it is now, in Neovim's diff mode, so `:diffget` in the file's window takes a hunk back.
--- The backend answers both questions (`changes`, `file_at`); every path shown was made visible.

local M = {}
local H = {}

--- Fills the quickfix list with the files changed since `opts.since` (default `"prompt"`, the
--- start of the last prompt; `"all"`, the start of the conversation; or a prompt checkpoint's
--- id) and opens it. Says why instead when nothing changed or there is nothing to compare with.
--- With `opts.only` (workspace-relative paths), those files alone are listed.
---@param opts? { since?: string, only?: string[] }
---@return boolean listed
function M.diff(opts)
  opts = opts or {}
  local rpc = require("agent.rpc")
  if not rpc.running() then
    -- A backend started now would hold a new conversation: nothing to compare with.
    vim.notify("agent: no prompt has been sent in this conversation yet; nothing to review", vim.log.levels.INFO)
    return false
  end
  local answer, err = rpc.changes(opts.since or "prompt")
  if not answer then
    vim.notify(err or "agent: the backend did not answer", vim.log.levels.ERROR)
    return false
  end
  local files = answer.files or {}
  if opts.only then
    local wanted = {}
    for _, path in ipairs(opts.only) do
      wanted[path] = true
    end
    files = vim.tbl_filter(function(file)
      return wanted[file.path] == true
    end, files)
  end
  if #files == 0 then
    vim.notify(("agent: nothing changed since %s"):format(answer.since), vim.log.levels.INFO)
    return false
  end
  local root = rpc.workspace()
  local items = {}
  for _, file in ipairs(files) do
    local abs = vim.fs.joinpath(root, file.path)
    local away = H.leads_away(root, abs)
    items[#items + 1] = {
      -- A link is not a file to jump to: `:cnext` would open what it points at.
      filename = not away and abs or nil,
      module = file.shown,
      text = H.row(file) .. (away and " (a link: not opened)" or ""),
      user_data = {
        agent_review = {
          checkpoint = answer.checkpoint,
          path = file.path,
          shown = file.shown,
          status = file.status,
          binary = file.binary,
        },
      },
    }
  end
  vim.fn.setqflist({}, " ", {
    title = ("agent: changes since %s"):format(answer.since),
    items = items,
    context = { agent_review = answer.checkpoint },
    quickfixtextfunc = H.qf_text,
  })
  vim.cmd("botright copen")
  vim.keymap.set("n", "<CR>", H.open_entry, {
    buffer = vim.api.nvim_get_current_buf(),
    desc = "agent: diff this file against its checkpoint (other lists: jump to the entry)",
    nowait = true,
    silent = true,
  })
  return true
end

--- Shows `path` (workspace-relative) as `checkpoint` had it against the file now: a diff of the
--- two for a changed or created file (an empty old side for a created one), the old text alone
--- for a deleted one. Opens in the current window (the previous one from the quickfix window).
---@param checkpoint string
---@param path string as on disk
---@param status "A"|"M"|"D"
---@param shown? string the path made visible (the backend's `shown`), for the buffer's name
function M.show(checkpoint, path, status, shown)
  local rpc = require("agent.rpc")
  local old, err = rpc.file_at(checkpoint, path)
  if not old then
    vim.notify(err or "agent: the backend did not answer", vim.log.levels.ERROR)
    return
  end
  local abs = vim.fs.joinpath(rpc.workspace(), path)
  local away = status ~= "D" and H.leads_away(rpc.workspace(), abs)
  H.enter_view()
  local scratch = H.scratch(checkpoint, shown or path, old.text or "")
  if status == "D" or away then
    -- A link (or a path through one) is never opened for editing: a `:diffget` and `:w` in it
    -- would write wherever it points, outside the workspace as well. Its old text alone.
    vim.api.nvim_win_set_buf(0, scratch)
    H.watch_view({ vim.api.nvim_get_current_win() })
    if away then
      vim.notify(
        ("agent: %s %s; it is not opened, so nothing is written through it"):format(shown or path, away),
        vim.log.levels.WARN
      )
    end
    return
  end
  local opened, err = pcall(vim.cmd.edit, vim.fn.fnameescape(abs))
  if not opened then
    -- (A swap file's question answered with Abort, say.) The empty view goes; nothing else.
    H.leave_view(H.view)
    vim.notify(("agent: could not open %s: %s"):format(shown or path, err), vim.log.levels.WARN)
    return
  end
  -- The file's own filetype (detected from its name and text), for the same highlighting.
  vim.bo[scratch].filetype = vim.bo.filetype
  if vim.bo.fileformat == "dos" then
    -- Read as the file is: its buffer has no CRs at the line ends, so neither may the old side,
    -- or every line would differ and `:diffget` would bring CRs in.
    local lines = vim.api.nvim_buf_get_lines(scratch, 0, -1, false)
    for i, line in ipairs(lines) do
      lines[i] = (line:gsub("\r$", ""))
    end
    vim.bo[scratch].modifiable = true
    vim.api.nvim_buf_set_lines(scratch, 0, -1, false, lines)
    vim.bo[scratch].modifiable = false
    vim.bo[scratch].modified = false
  end
  local file_win = vim.api.nvim_get_current_win()
  local old_win = vim.api.nvim_open_win(scratch, false, { split = "left", win = file_win })
  H.watch_view({ file_win, old_win })
  for _, win in ipairs({ old_win, file_win }) do
    vim.api.nvim_win_call(win, function()
      vim.cmd("diffthis")
    end)
  end
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = scratch,
    once = true,
    desc = "agent: leave diff mode with the checkpoint's side",
    callback = function()
      -- At once, not scheduled: the next diff may be opened in the same window right after.
      if vim.api.nvim_win_is_valid(file_win) then
        vim.api.nvim_win_call(file_win, function()
          vim.cmd("diffoff")
        end)
      end
    end,
  })
  H.map_revert(vim.api.nvim_win_get_buf(file_win), scratch)
  -- The cursor on the first change.
  vim.api.nvim_win_set_cursor(file_win, { 1, 0 })
  if vim.fn.diff_hlID(1, 1) == 0 then
    pcall(vim.cmd, "silent! normal! ]c")
  end
end

-- Helpers ------------------------------------------------------------------------------------

--- Maps `keymaps.diff.revert` in the file's buffer while the view shows it: the change under
--- the cursor goes back to the checkpoint's version (`:diffget` from the checkpoint's side, in
--- the buffer; the file is written when you save). The person's own mapping of the key comes
--- back when the view closes.
function H.map_revert(buf, scratch)
  local key = require("agent.config").options.keymaps.diff.revert
  if not key then
    return
  end
  local saved = vim.api.nvim_buf_call(buf, function()
    return vim.fn.maparg(key, "n", false, true)
  end)
  vim.keymap.set("n", key, function()
    local line = vim.fn.line(".")
    local changed = vim.fn.diff_hlID(line, 1) ~= 0 or vim.fn.diff_filler(line) > 0
    if not changed then
      vim.notify(
        ("agent: no change under the cursor (]c goes to the next); %s takes back the one you are on"):format(key),
        vim.log.levels.INFO
      )
      return
    end
    local ok, err = pcall(vim.cmd, ("diffget %d"):format(scratch))
    if not ok then
      vim.notify(("agent: could not take the change back: %s"):format(err), vim.log.levels.WARN)
    end
  end, { buffer = buf, desc = "agent: take the change under the cursor back to the checkpoint's version" })
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = scratch,
    once = true,
    desc = "agent: the revert key goes with the diff view",
    callback = function()
      if vim.api.nvim_buf_is_valid(buf) then
        pcall(vim.keymap.del, "n", key, { buffer = buf })
        if saved and saved.buffer == 1 then
          vim.api.nvim_buf_call(buf, function()
            pcall(vim.fn.mapset, "n", false, saved)
          end)
        end
      end
    end,
  })
end

-- Why the file at `abs` must not be opened to edit, or nil: it is a symbolic link, or a
-- directory on its way is one that leads out of `root`. Said with what it points at, made
-- visible (the link's text is anybody's).
function H.leads_away(root, abs)
  local stat = vim.uv.fs_lstat(abs)
  if stat and stat.type == "link" then
    local target = vim.uv.fs_readlink(abs) or "?"
    return ("is a symbolic link (to %s)"):format(vim.fn.strtrans(target))
  end
  -- A file that is not there (deleted, or not made yet) is judged by the nearest directory
  -- that is: one of those may be a link out.
  local near = abs
  while not vim.uv.fs_lstat(near) and vim.fs.dirname(near) ~= near do
    near = vim.fs.dirname(near)
  end
  local real, real_root = vim.uv.fs_realpath(near), vim.uv.fs_realpath(root)
  if real and real_root and not require("agent.paths").within(real, real_root) then
    return ("leads out of the workspace (to %s)"):format(vim.fn.strtrans(real))
  end
  return nil
end

-- `A src/new.rs +12 -0`, `M logo.png (binary)`.
function H.row(file)
  if file.binary then
    return ("%s %s (binary)"):format(file.status, file.shown)
  end
  return ("%s %s +%d -%d"):format(file.status, file.shown, file.added or 0, file.removed or 0)
end

-- The quickfix window shows an entry's text alone: it already names the file.
function H.qf_text(info)
  local list = info.quickfix == 1 and vim.fn.getqflist({ id = info.id, items = 1 })
    or vim.fn.getloclist(info.winid, { id = info.id, items = 1 })
  local lines = {}
  for i = info.start_idx, info.end_idx do
    lines[#lines + 1] = list.items[i].text
  end
  return lines
end

-- <CR> in the quickfix window: the diff for one of ours, the usual jump for any other entry.
function H.open_entry()
  local line = vim.fn.line(".")
  local is_loclist = vim.fn.win_gettype() == "loclist"
  local list = is_loclist and vim.fn.getloclist(0, { items = 1 }) or vim.fn.getqflist({ items = 1 })
  local item = list.items[line]
  local ours = item and type(item.user_data) == "table" and item.user_data.agent_review
  if not ours then
    vim.cmd(("%d%s"):format(line, is_loclist and "ll" or "cc"))
    return
  end
  vim.fn.setqflist({}, "a", { idx = line })
  if ours.binary then
    vim.notify(("agent: %s is a binary file; there is no text to compare"):format(ours.shown), vim.log.levels.INFO)
    return
  end
  M.show(ours.checkpoint, ours.path, ours.status, ours.shown)
end

-- The scratch buffer holding `text` (the checkpoint's bytes), read-only, named for what it is.
function H.scratch(checkpoint, shown, text)
  local name = ("agent://checkpoint/%s/%s"):format(checkpoint:sub(1, 12), shown)
  local existing = vim.fn.bufnr("^" .. vim.fn.escape(name, "\\^$.*~[]") .. "$")
  if existing > 0 then
    vim.api.nvim_buf_delete(existing, { force = true })
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  local lines = vim.split(text, "\n", { plain = true })
  if lines[#lines] == "" then
    lines[#lines] = nil
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  local bo = vim.bo[buf]
  bo.buftype = "nofile"
  bo.bufhidden = "wipe"
  bo.swapfile = false
  bo.modifiable = false
  bo.readonly = true
  bo.modified = false
  vim.b[buf].agent_checkpoint = checkpoint
  bo.filetype = vim.filetype.match({ filename = shown, contents = lines }) or ""
  return buf
end

-- The diff view: a tab page of its own, so the person's windows stay as they were; the same
-- tab for the next file, and closing it (or either side) goes back to where <CR> was pressed.
H.view = nil ---@type { tab: integer, origin: integer }?

-- Opens a fresh tab page for the view (the one before, if open, is closed: one at a time), and
-- remembers where to go back to: where <CR> was pressed, or where the view was opened from
-- when <CR> was pressed in the view's own tab page.
function H.enter_view()
  local here = vim.api.nvim_get_current_win()
  local origin = here
  local view = H.view
  if view then
    H.view = nil -- its windows closing here is not the person closing the view
    pcall(vim.api.nvim_del_augroup_by_name, "agent.review.view")
    if vim.api.nvim_tabpage_is_valid(view.tab) then
      if vim.api.nvim_win_get_tabpage(here) == view.tab then
        origin = view.origin
      end
      if #vim.api.nvim_list_tabpages() > 1 then
        pcall(vim.cmd.tabclose, vim.api.nvim_tabpage_get_number(view.tab))
      end
    end
  end
  H.close_views()
  vim.cmd("tabnew")
  vim.bo.bufhidden = "wipe" -- the empty buffer tabnew made goes once something else is shown
  H.view = { tab = vim.api.nvim_get_current_tabpage(), origin = origin }
end

-- Closing either side closes the view, and the cursor goes back to where it came from.
function H.watch_view(wins)
  local view = H.view
  if not view then
    return
  end
  local group = vim.api.nvim_create_augroup("agent.review.view", { clear = true })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    pattern = vim.tbl_map(tostring, wins),
    desc = "agent: closing a side of the diff closes the view",
    callback = function()
      vim.schedule(function()
        H.leave_view(view)
      end)
    end,
  })
end

-- Closes the view's tab page (when it is still there) and goes back to its origin.
function H.leave_view(view)
  if not view or H.view ~= view then
    return
  end
  H.view = nil
  pcall(vim.api.nvim_del_augroup_by_name, "agent.review.view")
  if vim.api.nvim_tabpage_is_valid(view.tab) and #vim.api.nvim_list_tabpages() > 1 then
    pcall(vim.cmd.tabclose, vim.api.nvim_tabpage_get_number(view.tab))
  end
  if vim.api.nvim_win_is_valid(view.origin) then
    pcall(vim.api.nvim_set_current_win, view.origin)
  end
end

-- Closes the checkpoint buffers of an earlier diff (their windows go with them).
function H.close_views()
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_valid(buf) and vim.api.nvim_buf_get_name(buf):find("^agent://checkpoint/") then
      for _, win in ipairs(vim.fn.win_findbuf(buf)) do
        if #vim.api.nvim_tabpage_list_wins(0) > 1 then
          pcall(vim.api.nvim_win_close, win, true)
        end
      end
      pcall(vim.api.nvim_buf_delete, buf, { force = true })
    end
  end
end

return M
