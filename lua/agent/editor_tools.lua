--- The editor's read-only tools for external agents (`editor_tools`, `agent-nvim mcp`): each
--- answers one call from what this Neovim knows, as text. The backend checked and resolved
--- `args.path` (absolute, inside the workspace) and bounds the answer; here, files outside the
--- workspace root are left out of every list, and nothing is changed: no buffer is written, none
--- is loaded (a file not open in Neovim has no diagnostics or language server here).

local M = {}
local H = {}

local severities = { "error", "warning", "info", "hint" }

--- Answers `tool` with `args` for the workspace at `root`: the text, or `{ error = why }`.
---@param tool string
---@param args table
---@param root string
---@return string|{ error: string }
function M.call(tool, args, root)
  args = type(args) == "table" and args or {}
  local handler = H.tools[tool]
  if not handler then
    return { error = ("no tool named %s"):format(tostring(tool)) }
  end
  local ok, answer = pcall(handler, args, root)
  if not ok then
    return { error = ("%s failed: %s"):format(tool, tostring(answer)) }
  end
  return answer
end

--- `path` relative to `root`, or nil when it is outside: by its name, and by where it really
--- is (a buffer opened through a link in the workspace to a folder outside it is outside, as
--- the backend's path check has it). A file not on disk yet is placed by its folder.
function H.relative(path, root)
  if type(path) ~= "string" or path == "" then
    return nil
  end
  local full = vim.fs.normalize(vim.fn.fnamemodify(path, ":p"))
  local prefix = vim.fs.normalize(root) .. "/"
  if full:sub(1, #prefix) ~= prefix then
    return nil
  end
  local real_root = (vim.uv.fs_realpath(root) or root) .. "/"
  local real = vim.uv.fs_realpath(full)
  if not real then
    local folder = vim.uv.fs_realpath(vim.fs.dirname(full))
    real = folder and (folder .. "/" .. vim.fs.basename(full))
  end
  if not real or real:sub(1, #real_root) ~= real_root then
    return nil
  end
  return full:sub(#prefix + 1)
end

--- The most bytes of a buffer's lines one answer gathers (the backend then clamps the answer
--- as read_file clamps a file): a huge buffer is never read whole for a call.
H.MAX_BYTES = 100000

--- Lines `from` to `to` (1-based, inclusive; -1: the last) of `buf`, joined, stopping at
--- H.MAX_BYTES with a line saying how many were left out.
function H.text(buf, from, to)
  local last = to == -1 and vim.api.nvim_buf_line_count(buf) or to
  local out, size, n = {}, 0, from
  while n <= last do
    -- A thousand lines at a time: never the whole of a huge buffer.
    local chunk = vim.api.nvim_buf_get_lines(buf, n - 1, math.min(last, n + 999), false)
    if #chunk == 0 then
      break
    end
    for _, line in ipairs(chunk) do
      if size + #line > H.MAX_BYTES then
        out[#out + 1] = ("… (%d more lines left out)"):format(last - n + 1)
        return table.concat(out, "\n")
      end
      out[#out + 1] = line
      size = size + #line + 1
      n = n + 1
    end
  end
  return table.concat(out, "\n")
end

--- The loaded buffer holding `path`, or nil.
function H.buffer(path)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if
      vim.api.nvim_buf_is_loaded(buf) and vim.fs.normalize(vim.api.nvim_buf_get_name(buf)) == vim.fs.normalize(path)
    then
      return buf
    end
  end
  return nil
end

function H.not_open(path, root)
  return {
    error = ("%s is not open in Neovim: only open files have diagnostics and a language server here"):format(
      H.relative(path, root) or path
    ),
  }
end

H.tools = {}

function H.tools.diagnostics(args, root)
  local bufs = {}
  if args.path then
    local buf = H.buffer(args.path)
    if not buf then
      return H.not_open(args.path, root)
    end
    bufs = { buf }
  else
    for _, buf in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(buf) and H.relative(vim.api.nvim_buf_get_name(buf), root) then
        bufs[#bufs + 1] = buf
      end
    end
  end
  local lines = {}
  for _, buf in ipairs(bufs) do
    local rel = H.relative(vim.api.nvim_buf_get_name(buf), root)
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      lines[#lines + 1] = ("%s:%d:%d: %s: %s%s"):format(
        rel,
        d.lnum + 1,
        d.col + 1,
        severities[d.severity] or "info",
        tostring(d.message):gsub("\n", " "),
        d.source and (" [%s]"):format(d.source) or ""
      )
    end
  end
  if #lines == 0 then
    return args.path and ("no diagnostics for %s"):format(H.relative(args.path, root)) or "no diagnostics"
  end
  return table.concat(lines, "\n")
end

function H.tools.open_buffers(_, root)
  local out = {}
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    local rel = vim.api.nvim_buf_is_loaded(buf)
      and vim.bo[buf].buftype == ""
      and H.relative(vim.api.nvim_buf_get_name(buf), root)
    if rel then
      if vim.bo[buf].modified then
        out[#out + 1] = ("%s (unsaved changes):"):format(rel)
        out[#out + 1] = H.text(buf, 1, -1)
      else
        out[#out + 1] = rel
      end
    end
  end
  return #out > 0 and table.concat(out, "\n") or "no file of the workspace is open"
end

function H.tools.selection(_, root)
  -- The window the person worked in last: the current one, unless it is agent.nvim's own.
  local wins = { vim.api.nvim_get_current_win(), vim.fn.win_getid(vim.fn.winnr("#")) }
  for _, win in ipairs(wins) do
    local buf = vim.api.nvim_win_is_valid(win) and vim.api.nvim_win_get_buf(win)
    local rel = buf and H.relative(vim.api.nvim_buf_get_name(buf), root)
    if rel then
      local from = vim.api.nvim_buf_get_mark(buf, "<")
      local to = vim.api.nvim_buf_get_mark(buf, ">")
      if from[1] == 0 or to[1] == 0 then
        return ("nothing was selected in %s"):format(rel)
      end
      return ("%s:%d-%d\n%s"):format(rel, from[1], to[1], H.text(buf, from[1], to[1]))
    end
  end
  return "no file of the workspace is shown"
end

--- One LSP request at a position (or for the whole file), its results gathered from every
--- client, waiting at most 2 s.
function H.lsp(method, args, root, position)
  local buf = H.buffer(args.path)
  if not buf then
    return nil, H.not_open(args.path, root)
  end
  if #vim.lsp.get_clients({ bufnr = buf }) == 0 then
    return nil, { error = ("no language server is attached to %s"):format(H.relative(args.path, root)) }
  end
  local params = { textDocument = { uri = vim.uri_from_bufnr(buf) } }
  if position then
    params.position = { line = args.line - 1, character = args.column - 1 }
    params.context = { includeDeclaration = true }
  end
  local answers = vim.lsp.buf_request_sync(buf, method, params, 2000) or {}
  local results = {}
  for _, answer in pairs(answers) do
    if answer.result then
      results[#results + 1] = answer.result
    end
  end
  return results
end

--- Locations as `path:line:column`, those outside the workspace counted, not named.
function H.locations(results, root)
  local lines, outside = {}, 0
  for _, result in ipairs(results) do
    local list = vim.islist(result) and result or { result }
    for _, loc in ipairs(list) do
      local uri = loc.uri or loc.targetUri
      local range = loc.range or loc.targetSelectionRange
      local rel = uri and H.relative(vim.uri_to_fname(uri), root)
      if rel and range then
        lines[#lines + 1] = ("%s:%d:%d"):format(rel, range.start.line + 1, range.start.character + 1)
      elseif uri then
        outside = outside + 1
      end
    end
  end
  if outside > 0 then
    lines[#lines + 1] = ("(%d outside the workspace left out)"):format(outside)
  end
  return #lines > 0 and table.concat(lines, "\n") or "nothing found"
end

function H.tools.definition(args, root)
  local results, err = H.lsp("textDocument/definition", args, root, true)
  return err or H.locations(results, root)
end

function H.tools.references(args, root)
  local results, err = H.lsp("textDocument/references", args, root, true)
  return err or H.locations(results, root)
end

function H.tools.hover(args, root)
  local results, err = H.lsp("textDocument/hover", args, root, true)
  if err then
    return err
  end
  local out = {}
  for _, result in ipairs(results) do
    local contents = result.contents
    if type(contents) == "table" then
      local lines = vim.lsp.util.convert_input_to_markdown_lines(contents)
      out[#out + 1] = table.concat(lines, "\n")
    elseif type(contents) == "string" then
      out[#out + 1] = contents
    end
  end
  return #out > 0 and table.concat(out, "\n\n") or "nothing to say about it"
end

function H.tools.document_symbols(args, root)
  local results, err = H.lsp("textDocument/documentSymbol", args, root, false)
  if err then
    return err
  end
  local lines = {}
  local function walk(symbols, depth)
    for _, symbol in ipairs(symbols or {}) do
      local range = symbol.selectionRange or symbol.range or (symbol.location and symbol.location.range)
      lines[#lines + 1] = ("%s%s %s%s"):format(
        string.rep("  ", depth),
        vim.lsp.protocol.SymbolKind[symbol.kind] or "Symbol",
        tostring(symbol.name),
        range and (" :%d"):format(range.start.line + 1) or ""
      )
      walk(symbol.children, depth + 1)
    end
  end
  for _, result in ipairs(results) do
    walk(result, 0)
  end
  return #lines > 0 and table.concat(lines, "\n") or "no symbols"
end

return M
