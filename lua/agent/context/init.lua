--- Context a prompt carries (see :help agent-context): in the text, `@path` attaches a
--- workspace file and `#buffer`, `#buffers`, `#selection`, `#diagnostics`, `#quickfix` attach
--- what Neovim holds; the chat's input completes them (and `/` commands, from agent.slash).
---
--- Files are read by the backend (`attach`): through the workspace's path check, clamped as
--- read_file clamps, from the buffer when it has unsaved changes. `#selection`, `#diagnostics`
--- and `#quickfix` are gathered here and clamped by the backend too. "The current buffer" is
--- the one the person was in before going to the chat: the last window left that is not the
--- chat's (or the current window when the prompt is sent from elsewhere, as `:Agent`).

local format = require("agent.context.format")

local M = {}
local H = {}

--- The `#` items, in the order completion offers them.
M.items = {
  { word = "#buffer", info = "the current buffer" },
  { word = "#buffers", info = "every file buffer" },
  { word = "#selection", info = "the last selection" },
  { word = "#diagnostics", info = "its diagnostics" },
  { word = "#quickfix", info = "the quickfix list" },
  { word = "#clipboard", info = "the clipboard's image" },
}

--- How many files `@` completion offers.
M.FILE_LIMIT = 50

H.origin = nil ---@type integer? the last window left that is not the chat's

--- Starts remembering the window the person leaves for the chat (idempotent).
function M.track()
  if H.tracking then
    return
  end
  H.tracking = true
  vim.api.nvim_create_autocmd("WinLeave", {
    group = vim.api.nvim_create_augroup("agent.context", { clear = true }),
    desc = "agent: remember the buffer #buffer, #selection and #diagnostics mean",
    callback = function()
      local win = vim.api.nvim_get_current_win()
      if not H.ours(vim.api.nvim_win_get_buf(win)) and vim.api.nvim_win_get_config(win).relative == "" then
        H.origin = win
      end
    end,
  })
end

--- The window whose buffer is "the current buffer": the current one unless it is the chat's,
--- else the last one left; nil when there is none.
---@return integer?
function M.origin()
  local win = vim.api.nvim_get_current_win()
  if not H.ours(vim.api.nvim_win_get_buf(win)) then
    return win
  end
  if H.origin and vim.api.nvim_win_is_valid(H.origin) then
    return H.origin
  end
  return nil
end

--- The prompt with its context: `text` as the model reads it (the typed prompt, then each
--- attachment), the attachments, for the chat's rows, and the numbers the backend holds its
--- images and audio clips under (`@shot.png`, `#clipboard`, a pasted `#image:N`, `@note.wav`),
--- in the order attached. A prompt without `@` or `#`
--- items comes back as it is, without asking the backend anything.
---@param prompt string
---@return { text: string, attachments: agent.Attachment[], images: integer[] }
function M.expand(prompt)
  -- What each item came from, by position: why it attached nothing is said in those words.
  local items, seen, origins = {}, {}, {}
  local unattached = {} ---@type agent.Attachment[] `#` words that found nothing to ask for
  local function add(item, key, origin)
    if not seen[key] then
      seen[key] = true
      items[#items + 1] = item
      origins[#items] = origin
    end
  end
  for word in prompt:gmatch("%S+") do
    -- `(@calc.py)`, `"#buffer"`: an opening bracket or quote is not part of the item.
    local token = word:gsub("^[%(%[{\"'`]+", "")
    local lead = token:sub(1, 1)
    if lead == "@" and #token > 1 then
      local path = H.path_token(token:sub(2))
      add({ path = path }, H.file_key(path), { label = "@ " .. path, missing = "no such file in the workspace" })
    elseif token:match("^#image:%d+") then
      local n = tonumber(token:match("^#image:(%d+)"))
      add({ image = n }, "#image:" .. n, { label = "#image:" .. n, missing = "no such image" })
    elseif lead == "#" then
      local name = token:match("^#(%a+)")
      local gathered, why = H.gather(name)
      for _, item in ipairs(gathered) do
        local origin = { label = "#" .. name }
        if item.path then
          origin.missing = ("%s no longer exists"):format(H.shown_name(item.path))
        end
        add(item, item.path and H.file_key(item.path) or ("#" .. name), origin)
      end
      if why and not seen["#" .. name] then
        seen["#" .. name] = true
        unattached[#unattached + 1] = { row = ("#%s: %s"):format(name, why), problem = why }
      end
    end
  end
  if #items == 0 then
    return { text = format.prompt(prompt, unattached), attachments = unattached, images = {} }
  end
  local answers, err = require("agent.rpc").attach(items)
  if not answers then
    vim.notify(("agent: the prompt's attachments could not be read: %s"):format(err), vim.log.levels.WARN)
    return { text = prompt, attachments = {}, images = {} }
  end
  local attachments, images = {}, {}
  for i, answer in ipairs(answers) do
    if answer.image then
      images[#images + 1] = answer.image
      attachments[#attachments + 1] = { row = answer.label, image = true, file = answer.file }
    elseif answer.audio then
      images[#images + 1] = answer.audio
      attachments[#attachments + 1] = { row = answer.label, audio = true }
    elseif answer.missing then
      -- Nothing to attach: the chat (and the model) are told why, and the prompt still goes.
      local origin = origins[i] or { label = "@ ?", missing = "no such file" }
      attachments[#attachments + 1] = {
        row = ("%s: %s"):format(origin.label, origin.missing),
        problem = origin.missing,
      }
    else
      attachments[#attachments + 1] = {
        row = format.row(answer),
        text = answer.text,
        shown = answer.shown,
        problem = answer.problem,
      }
    end
  end
  vim.list_extend(attachments, unattached)
  return { text = format.prompt(prompt, attachments), attachments = attachments, images = images }
end

---@class agent.CompletionItem
---@field word string what goes in the input (`@src/calc.py`, `#buffer`, `/new`)
---@field kind "file"|"context"|"command"
---@field info? string what it does (a command's description)

--- The word being completed at the end of `before` (the input's line up to the cursor; `first`
--- when it is the input's first line): the byte column (0-based) where it starts, its lead
--- (`@`, `#` or `/`) and what follows the lead. Nil when the cursor is not after `@`, `#` or a
--- leading `/`.
---@param before string
---@param first? boolean
---@return integer? start
---@return string? lead
---@return string? query
function M.token(before, first)
  local start, token = before:match("()([@#/][^%s]*)$")
  -- After a blank, or an opening bracket or quote (`(@calc.py`), as the prompt reads them.
  if not start or (start > 1 and not before:sub(start - 1, start - 1):match("[%s%(%[{\"'`]")) then
    return nil
  end
  local lead = token:sub(1, 1)
  if lead == "/" and not (first and start == 1) then
    return nil
  end
  return start - 1, lead, token:sub(2)
end

--- Completes the word at the end of `before` (see M.token): calls `done({ start, word, items })`
--- (`word` the lead and query it completes),
--- the items best first, at once for `#` and `/`, and for `@` when the backend has found the
--- files (none, when a later query replaced this one: only the latest is answered). False
--- when there is no word to complete (`done` is not called).
---@param before string
---@param first boolean?
---@param done fun(found: { start: integer, word: string, items: agent.CompletionItem[] })
---@return boolean
function M.complete(before, first, done)
  local start, lead, query = M.token(before, first)
  if not start then
    return false
  end
  local items = {}
  local answer = { start = start, word = lead .. query, items = items }
  if lead == "@" then
    local rpc = require("agent.rpc")
    -- Only from a running backend: completing must not start one.
    if not rpc.running() then
      done(answer)
      return true
    end
    rpc.files(query, M.FILE_LIMIT, function(found)
      answer.unanswered = found == nil -- replaced by a later query, or the backend failed
      for _, file in ipairs(found and found.files or {}) do
        items[#items + 1] = { word = "@" .. file, kind = "file" }
      end
      done(answer)
    end)
    return true
  elseif lead == "#" then
    for _, item in ipairs(M.items) do
      if vim.startswith(item.word, lead .. query) then
        items[#items + 1] = { word = item.word, kind = "context", info = item.info }
      end
    end
  else
    for _, command in ipairs(require("agent.slash").commands()) do
      if vim.startswith(command.name, query) then
        items[#items + 1] = { word = "/" .. command.name, kind = "command", info = command.description }
      end
    end
  end
  done(answer)
  return true
end

--- 'omnifunc' of the chat's input (<C-x><C-o>). `#` and `/` items are answered at once; for
--- `@` it answers nothing and opens the menu when the backend has found the files (if the
--- word typed is still the same), so Neovim never waits for the backend.
---@param findstart integer
---@param base string
---@return integer|table
function M.omnifunc(findstart, base)
  if findstart == 1 then
    local line = vim.api.nvim_get_current_line()
    local col = vim.api.nvim_win_get_cursor(0)[2]
    local start = M.token(line:sub(1, col), vim.fn.line(".") == 1)
    -- A `/` command only where the first call found one: at the start of the input.
    H.omni_first = start == 0 and vim.fn.line(".") == 1
    H.omni_start = start
    return start or -3
  end
  local answer = {}
  local now = true
  M.complete(base, H.omni_first, function(found)
    -- `base` is the word alone; it starts where the first call found it.
    found.start = H.omni_start or found.start
    if now then
      answer = vim.tbl_map(H.complete_item, found.items)
    else
      H.show(found)
    end
  end)
  now = false
  return answer
end

--- Sets up the chat's input buffer `buf`: 'omnifunc', and (`input.completion`, Neovim 0.11) the
--- completion menu opened by itself after `@`, `#` and a leading `/`, refreshed as the person
--- types ('completeopt' is set for the buffer only, so nothing is inserted until an item is
--- picked).
---@param buf integer
function M.setup_input(buf)
  M.track()
  vim.bo[buf].omnifunc = "v:lua.require'agent.context'.omnifunc"
  -- 'completeopt' is global before 0.11: <C-x><C-o> only.
  if vim.fn.has("nvim-0.11") == 1 and require("agent.config").options.input.completion ~= false then
    H.auto_menu(buf)
  end
end

-- Whether the input opens a menu of its own (`input.completion`), asked at each keystroke (a
-- completion plugin may be loaded late): with "auto", not once our blink.cmp or nvim-cmp source
-- is in use, whose plugin opens its menu with our items.
function H.menu_of_our_own()
  local completion = require("agent.config").options.input.completion
  if completion == "auto" then
    return not (package.loaded["agent.cmp.blink"] or package.loaded["agent.cmp.nvim_cmp"])
  end
  return completion == true
end

-- The menu opened by itself in the input `buf`, and refreshed as the person types.
function H.auto_menu(buf)
  vim.api.nvim_set_option_value("completeopt", "menuone,noinsert,noselect,popup", { buf = buf })
  local group = vim.api.nvim_create_augroup("agent.context.input." .. buf, { clear = true })
  vim.api.nvim_create_autocmd({ "TextChangedI", "TextChangedP" }, {
    group = group,
    buffer = buf,
    desc = "agent: complete @files, #context and /commands as they are typed",
    callback = function()
      H.auto_complete()
    end,
  })
  vim.api.nvim_create_autocmd("CompleteDone", {
    group = group,
    buffer = buf,
    desc = "agent: do not offer again what was just picked",
    callback = function()
      local item = vim.v.completed_item
      H.picked = type(item) == "table" and item.word or nil
    end,
  })
end

-- Helpers ------------------------------------------------------------------------------------

function H.ours(buf)
  local window = require("agent.chat.window")
  return buf == window.buf or buf == window.input_buf
end

-- `@calc.py,` means calc.py: punctuation that ends a sentence is left off a path that does not
-- exist with it, and so is a line number (`@calc.py:12`, `@calc.py:12-20`, as compilers write
-- them: the whole file is attached).
function H.path_token(path)
  if H.exists(path) then
    return path
  end
  local bare = path:gsub("[%.,;:!%?%)%]}\"'`]+$", "")
  local unnumbered = bare:gsub(":%d+[-:%d]*$", "")
  for _, candidate in ipairs({ bare, unnumbered }) do
    if candidate ~= "" and H.exists(candidate) then
      return candidate
    end
  end
  return path
end

-- Whether `path` (relative to the root, or absolute) names something on disk.
function H.exists(path)
  return vim.uv.fs_stat(H.absolute(path)) ~= nil
end

function H.absolute(path)
  return path:sub(1, 1) == "/" and path or (require("agent.rpc").workspace() .. "/" .. path)
end

-- One key for a file however it was named (`@calc.py`, `#buffer` on it), so it is attached once.
function H.file_key(path)
  return "@" .. vim.fs.normalize(H.absolute(path))
end

-- The attach items for `#name` (an unknown name: none, and nothing said: `#include` in a
-- pasted line is no request), and why there are none when `#name` asked for some.
function H.gather(name)
  local win = M.origin()
  local buf = win and vim.api.nvim_win_get_buf(win)
  local no_window = "no window to take it from (the agent's windows are all that is open)"
  if not buf and (name == "buffer" or name == "selection" or name == "diagnostics") then
    return {}, no_window
  end
  if name == "buffer" then
    return { H.buffer_item(buf) }
  elseif name == "buffers" then
    -- The workspace's file buffers only: another project's files are not the agent's, and
    -- even their paths stay out of the prompt.
    local items = {}
    for _, b in ipairs(vim.api.nvim_list_bufs()) do
      if vim.bo[b].buflisted and vim.bo[b].buftype == "" and H.in_workspace(vim.api.nvim_buf_get_name(b)) then
        items[#items + 1] = H.buffer_item(b)
      end
    end
    if #items == 0 then
      return {}, "no file of the workspace is open"
    end
    return items
  elseif name == "selection" then
    return { H.selection_item(buf) }
  elseif name == "diagnostics" then
    return { H.diagnostics_item(buf) }
  elseif name == "quickfix" then
    return { H.quickfix_item() }
  elseif name == "clipboard" then
    local argv, why = require("agent.clipboard").command()
    if not argv then
      return {}, why
    end
    return { { clipboard = argv } }
  end
  return {}
end

-- True when `name` (a buffer's) is a file beneath the workspace root, as written or once links
-- are followed. The backend checks the path again when it reads the file.
function H.in_workspace(name)
  if name == "" then
    return false
  end
  local paths = require("agent.paths")
  local file = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local root = vim.fs.normalize(require("agent.rpc").workspace())
  if paths.within(file, root) then
    return true
  end
  local real_file, real_root = vim.uv.fs_realpath(file), vim.uv.fs_realpath(root)
  return real_file ~= nil and real_root ~= nil and paths.within(real_file, real_root) ~= nil
end

-- A file buffer by its path (the backend reads it, or its unsaved text); another by its text.
function H.buffer_item(buf)
  local name = vim.api.nvim_buf_get_name(buf)
  if vim.bo[buf].buftype == "" and name ~= "" then
    return { path = vim.fn.fnamemodify(name, ":p") }
  end
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  return { label = ("# buffer %s"):format(name ~= "" and name or "[No Name]"), text = table.concat(lines, "\n") }
end

function H.shown_path(buf)
  return H.shown_name(vim.api.nvim_buf_get_name(buf))
end

-- A buffer's name as the chat shows it: workspace-relative when it is inside.
function H.shown_name(name)
  if name == "" then
    return "[No Name]"
  end
  local full = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local root = vim.fs.normalize(require("agent.rpc").workspace())
  -- Made visible: a file's name is anybody's, a newline or an escape in it included.
  return vim.fn.strtrans(require("agent.paths").within(full, root) or full)
end

-- The last visual selection in `buf` ('< and '>), its lines numbered.
function H.selection_item(buf)
  local first = vim.api.nvim_buf_get_mark(buf, "<")[1]
  local last = vim.api.nvim_buf_get_mark(buf, ">")[1]
  local path = H.shown_path(buf)
  if first == 0 or last == 0 then
    return { label = ("# selection %s"):format(path), text = "(no visual selection in this buffer yet)" }
  end
  local lines = vim.api.nvim_buf_get_lines(buf, first - 1, last, false)
  for i, line in ipairs(lines) do
    lines[i] = ("%d: %s"):format(first + i - 1, line)
  end
  return {
    label = ("# selection %s:%d-%d"):format(path, first, last),
    text = ("%s, lines %d-%d:\n%s"):format(path, first, last, table.concat(lines, "\n")),
  }
end

H.severity = { "ERROR", "WARN", "INFO", "HINT" }

-- `path:line:col: SEVERITY: message`, one a line, in the order of their positions.
function H.diagnostics_item(buf)
  local path = H.shown_path(buf)
  local diagnostics = vim.diagnostic.get(buf)
  table.sort(diagnostics, function(a, b)
    return a.lnum < b.lnum or (a.lnum == b.lnum and a.col < b.col)
  end)
  local lines = {}
  for _, d in ipairs(diagnostics) do
    lines[#lines + 1] = ("%s:%d:%d: %s: %s"):format(
      path,
      d.lnum + 1,
      d.col + 1,
      H.severity[d.severity] or "ERROR",
      (d.message or ""):gsub("\n", " ")
    )
  end
  return {
    label = ("# diagnostics %s"):format(path),
    text = #lines > 0 and table.concat(lines, "\n") or ("%s: no diagnostics"):format(path),
  }
end

function H.quickfix_item()
  local lines = {}
  for _, entry in ipairs(vim.fn.getqflist()) do
    local path = entry.bufnr > 0 and H.shown_path(entry.bufnr) or ""
    lines[#lines + 1] = ("%s:%d:%d: %s"):format(path, entry.lnum, entry.col, vim.trim(entry.text or ""))
  end
  return { label = "# quickfix", text = #lines > 0 and table.concat(lines, "\n") or "(the quickfix list is empty)" }
end

-- A menu line says what a command or a `#` item does (a file says nothing more than its path).
function H.complete_item(item)
  return { word = item.word, menu = item.info or "", info = item.info or "", icase = 1, dup = 0 }
end

-- The menu for the word before the cursor, unless an item of it is selected (the person is
-- moving through it) or it is the item just picked.
function H.auto_complete()
  if vim.fn.mode() ~= "i" or not H.menu_of_our_own() then
    return
  end
  if vim.fn.pumvisible() == 1 and vim.fn.complete_info({ "selected" }).selected ~= -1 then
    return
  end
  local line = vim.api.nvim_get_current_line()
  local col = vim.api.nvim_win_get_cursor(0)[2]
  local before = line:sub(1, col)
  local start = M.token(before, vim.fn.line(".") == 1)
  if not start then
    H.picked = nil
    return
  end
  if before:sub(start + 1) == H.picked then
    return
  end
  H.picked = nil
  M.complete(before, vim.fn.line(".") == 1, H.show)
end

-- Opens the menu with `found`'s items, if the person is still typing the word they are for:
-- in Insert mode, in the same buffer, the cursor's line still ending in that word where it
-- was found (an answer from the backend may come after another key).
function H.show(found)
  if
    found.unanswered
    or vim.fn.mode() ~= "i"
    or vim.api.nvim_get_current_buf() ~= require("agent.chat.window").input_buf
  then
    return
  end
  local line = vim.api.nvim_get_current_line()
  local col = vim.api.nvim_win_get_cursor(0)[2]
  local before = line:sub(1, col)
  if M.token(before, vim.fn.line(".") == 1) ~= found.start or before:sub(found.start + 1) ~= found.word then
    return
  end
  if vim.fn.pumvisible() == 1 and vim.fn.complete_info({ "selected" }).selected ~= -1 then
    return -- the person is moving through the menu shown
  end
  pcall(vim.fn.complete, found.start + 1, vim.tbl_map(H.complete_item, found.items))
end

return M
