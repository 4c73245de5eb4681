--- Undoing one edit from its chat row (`keymaps.chat.undo`, `u` on `▸ edit a.py`): the edit's
--- diff, as its row holds it, taken back in the file's buffer when every line it wrote is still
--- there as it wrote it (otherwise it says which line changed, and nothing is touched). The
--- buffer is written when it had no unsaved changes before; with unsaved changes of the
--- person's, the undo stays in the buffer for them to save.

local M = {}
local H = {}

--- Takes back the edit whose row holds `diff` (a unified diff of one file, paths relative to
--- `root`, the conversation's workspace); `exact`: the backend said nothing in it was made
--- visible. True when it did; otherwise it said why.
---@param diff string
---@param root string
---@param exact? boolean
---@return boolean undone
function M.edit(diff, root, exact)
  local why = H.inexact(diff, exact)
  if why then
    return H.refuse(why)
  end
  local rel = diff:match("\n%+%+%+ b/([^\n]+)") or diff:match("^%+%+%+ b/([^\n]+)")
  if not rel then
    return H.refuse("this row holds no diff of a file")
  end
  if diff:find("^%-%-%- /dev/null") or diff:find("\n%-%-%- /dev/null") then
    return H.refuse(("this edit created %s; delete it yourself, or :Agent rewind"):format(rel))
  end
  local hunks = H.hunks(diff)
  if #hunks == 0 then
    return H.refuse("this row's diff has no change")
  end
  local path = vim.fs.joinpath(root, rel)
  if not vim.uv.fs_stat(path) then
    return H.refuse(("%s is gone"):format(rel))
  end
  local buf = vim.fn.bufadd(path)
  vim.fn.bufload(buf)
  local unsaved = vim.bo[buf].modified
  if not unsaved and H.differs_from_disk(buf, path) then
    return H.refuse(("%s changed on disk since Neovim read it; :checktime reads it again, then undo again"):format(rel))
  end
  -- Every line the edit wrote, where it wrote it: otherwise the file changed since.
  for _, hunk in ipairs(hunks) do
    local now = vim.api.nvim_buf_get_lines(buf, hunk.at, hunk.at + #hunk.new, false)
    for i, line in ipairs(hunk.new) do
      if now[i] ~= line then
        return H.refuse(
          ("%s changed since this edit (line %d is no longer what it wrote); :Agent rewind goes back to before the prompt"):format(
            rel,
            hunk.at + i
          )
        )
      end
    end
  end
  if not vim.bo[buf].modifiable then
    return H.refuse(("%s's buffer is not modifiable"):format(rel))
  end
  local count = vim.api.nvim_buf_line_count(buf)
  local empty = count == 1 and vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ""
  for i = #hunks, 1, -1 do
    local hunk = hunks[i]
    if empty and #hunk.new == 0 then
      -- The edit emptied the file: its one empty line is the old text's place, not a line.
      vim.api.nvim_buf_set_lines(buf, 0, -1, false, hunk.old)
    else
      vim.api.nvim_buf_set_lines(buf, hunk.at, hunk.at + #hunk.new, false, hunk.old)
    end
  end
  if unsaved then
    vim.notify(
      ("agent: undid the edit of %s in its buffer; it has unsaved changes of yours, so :w saves it"):format(rel),
      vim.log.levels.INFO
    )
    return true
  end
  local ok, err = pcall(vim.api.nvim_buf_call, buf, function()
    vim.cmd("silent keepalt write")
  end)
  if not ok then
    vim.notify(
      ("agent: undid the edit of %s in its buffer, but could not write it: %s"):format(rel, err),
      vim.log.levels.WARN
    )
    return true
  end
  vim.notify(("agent: undid the edit of %s (u in its buffer takes the undo back)"):format(rel), vim.log.levels.INFO)
  return true
end

--- True when the unmodified buffer `buf` no longer holds what the file at `path` does.
function H.differs_from_disk(buf, path)
  local ok, disk = pcall(vim.fn.readfile, path, "b")
  if not ok then
    return true
  end
  if disk[#disk] == "" then
    disk[#disk] = nil -- the final newline
  end
  local dos = vim.bo[buf].fileformat == "dos"
  for i, line in ipairs(disk) do
    disk[i] = dos and (line:gsub("\r$", "")) or line
  end
  return not vim.deep_equal(disk, vim.api.nvim_buf_get_lines(buf, 0, -1, false))
end

function H.refuse(why)
  vim.notify("agent: not undone: " .. why, vim.log.levels.WARN)
  return false
end

--- Why the diff a row shows is not exactly what was written, or nil: it was cut, a key in it
--- was redacted, or a character in it was made visible (its escape is not the file's text).
function H.inexact(diff, exact)
  if not exact then
    return "this edit's diff shows characters as escapes, not as the file has them; :Agent rewind goes back to before the prompt"
  end
  if diff:find("\n\\ No newline at end of file", 1, true) then
    return "this edit changed the end of a file without a final newline; :Agent rewind goes back to before the prompt"
  end
  if diff:find("[... the diff goes on", 1, true) then
    return "this edit's diff is cut in its row (too long); :Agent rewind goes back to before the prompt"
  end
  if diff:find("[redacted]", 1, true) then
    return "this edit's diff has a secret left out; :Agent rewind goes back to before the prompt"
  end
  return nil
end

--- The hunks of a unified diff: where the new side starts (0-based), its lines, and the old
--- side's lines that replace them.
---@return { at: integer, new: string[], old: string[] }[]
function H.hunks(diff)
  local hunks, hunk = {}, nil
  for line in (diff .. "\n"):gmatch("([^\n]*)\n") do
    local start, count = line:match("^@@ %-[%d,]+ %+(%d+),?(%d*) @@")
    if start then
      count = count == "" and 1 or tonumber(count)
      start = tonumber(start)
      hunk = { at = count == 0 and start or start - 1, new = {}, old = {} }
      hunks[#hunks + 1] = hunk
    elseif hunk then
      local mark, text = line:sub(1, 1), line:sub(2)
      if mark == " " then
        hunk.new[#hunk.new + 1] = text
        hunk.old[#hunk.old + 1] = text
      elseif mark == "+" then
        hunk.new[#hunk.new + 1] = text
      elseif mark == "-" then
        hunk.old[#hunk.old + 1] = text
      end
    end
  end
  return hunks
end

return M
