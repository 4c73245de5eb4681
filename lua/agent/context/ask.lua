--- What an ask sends about where the person is: the cursor's line and the lines around it, or
--- the selected lines, numbered and fenced, from the buffer's text as it is in Neovim (saved or
--- not), within read_file's budget.

local M = {}

--- The workspace-relative path of buffer `buf` (absolute outside the workspace), or nil for a
--- buffer that is not a file.
---@param buf integer
---@return string?
function M.buffer_path(buf)
  if vim.bo[buf].buftype ~= "" then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(buf)
  if name == "" then
    return nil
  end
  local file = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local root = vim.fs.normalize(require("agent.rpc").workspace())
  local paths = require("agent.paths")
  for _, pair in ipairs({ { file, root }, { vim.uv.fs_realpath(file), vim.uv.fs_realpath(root) } }) do
    local f, r = pair[1], pair[2]
    local relative = f and r and paths.within(f, r)
    if relative then
      return relative
    end
  end
  return file
end

--- The most of the current buffer's text an ask sends, as read_file's clamp.
M.CONTEXT_CHARS = 20000

--- What the ask mapping sends about the cursor: the path, the line's number, and the line with
--- `ask.context_lines` lines before and after it (clamped to the buffer), numbered. The
--- buffer's text as it is in Neovim, saved or not. The cursor line comes first in the budget:
--- long lines around it are dropped before it is.
---@return { text: string, label: string }?
function M.cursor()
  local path = M.buffer_path(0)
  if not path then
    return nil
  end
  local line = vim.fn.line(".")
  local around = require("agent.config").options.ask.context_lines
  local count = vim.api.nvim_buf_line_count(0)
  -- The cursor line, then one above and one below in turn, while the budget lasts.
  local order = { line }
  for d = 1, around do
    if line - d >= 1 then
      order[#order + 1] = line - d
    end
    if line + d <= count then
      order[#order + 1] = line + d
    end
  end
  local taken, first, last, cut = require("agent.text").take_lines(0, order, M.CONTEXT_CHARS)
  local what = first == last and ("line %d"):format(line) or ("lines %d-%d, around line %d,"):format(first, last, line)
  return {
    label = ("line %d of %s"):format(line, path),
    text = ("(I am in %s, at line %d.)\n%s"):format(path, line, M.fenced(path, what, taken, first, last, cut)),
  }
end

--- What the ask mapping (or a ranged :Agent) sends about lines `first`..`last` of the current
--- buffer: the path and the lines, numbered.
---@param first integer
---@param last integer
---@return { text: string, label: string }?
function M.selection(first, last)
  local path = M.buffer_path(0)
  if not path then
    return nil
  end
  local order = {}
  for n = first, last do
    order[#order + 1] = n
  end
  local taken, from, to, cut = require("agent.text").take_lines(0, order, M.CONTEXT_CHARS)
  local what = first == last and ("line %d"):format(first) or ("lines %d-%d"):format(first, last)
  return {
    label = ("%s of %s"):format(what, path),
    text = "Selected " .. M.fenced(path, what, taken, from, to, cut),
  }
end

--- `{what} of {path}:` and the `taken` lines `first`..`last` in a fence longer than any backtick
--- run inside, with read_file's marker when the budget cut them.
---@param path string
---@param what string
---@param taken table<integer, string>
---@param first integer
---@param last integer
---@param cut boolean
---@return string
function M.fenced(path, what, taken, first, last, cut)
  local lines, longest = {}, 0
  for n = first, last do
    local text = taken[n]
    for ticks in text:gmatch("`+") do
      longest = math.max(longest, #ticks)
    end
    lines[#lines + 1] = text
  end
  if cut then
    lines[#lines + 1] = ("[... truncated at %d chars]"):format(M.CONTEXT_CHARS)
  end
  local fence = string.rep("`", math.max(3, longest + 1))
  return ("%s of %s:\n%s%s\n%s\n%s"):format(what, path, fence, vim.bo.filetype, table.concat(lines, "\n"), fence)
end

--- Asks for a question with vim.ui.input, naming what `context` is about, and sends it with the
--- context after it.
---@param api table the public API
---@param context? { text: string, label: string }
function M.interactive(api, context)
  local prompt = context and ("agent: ask about %s: "):format(context.label) or "agent: ask: "
  vim.ui.input({ prompt = prompt }, function(question)
    if not question or vim.trim(question) == "" then
      return
    end
    -- Only the person's words are read for `@` and `#`: the file's lines that follow are the
    -- repository's, and could name files or buffers the person never chose.
    api.ask(question, { context = context and context.text })
  end)
end

return M
