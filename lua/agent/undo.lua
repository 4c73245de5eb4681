--- Undoing one edit from its chat row (`keymaps.chat.undo`, `u` on `▸ edit a.py`): the edit's
--- diff, as its row holds it, taken back in the file's buffer when every line it wrote is still
--- there as it wrote it (otherwise it says which line changed, and nothing is touched). The
--- buffer is written when it had no unsaved changes before; with unsaved changes of the
--- person's, the undo stays in the buffer for them to save.

local M = {}
local H = {}

--- Takes back the edit whose row holds `diff` (a unified diff of one file, paths relative to
--- `root`). True when it did; otherwise it said why.
---@param diff string
---@param root string
---@return boolean undone
function M.edit(diff, root)
  local why = H.inexact(diff)
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
  for i = #hunks, 1, -1 do
    local hunk = hunks[i]
    vim.api.nvim_buf_set_lines(buf, hunk.at, hunk.at + #hunk.new, false, hunk.old)
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

function H.refuse(why)
  vim.notify("agent: not undone: " .. why, vim.log.levels.WARN)
  return false
end

--- Why the diff a row shows is not exactly what was written, or nil: it was cut, a key in it
--- was redacted, or a character in it was made visible (its escape is not the file's text).
function H.inexact(diff)
  if diff:find("[... the diff goes on", 1, true) then
    return "this edit's diff is cut in its row (too long); :Agent rewind goes back to before the prompt"
  end
  if diff:find("[redacted]", 1, true) then
    return "this edit's diff has a secret left out; :Agent rewind goes back to before the prompt"
  end
  -- (The escapes a file's own text is likeliest to hold, a NUL-free text's `\0` and `\r`, are
  -- left out: a text file has no NUL, and a CR shows only before a newline, which is dropped.)
  if diff:find("\\e") or diff:find("\\u{%x+}") then
    return "this edit's diff shows characters as escapes, not as the file has them; :Agent rewind goes back to before the prompt"
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
