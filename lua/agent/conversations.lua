--- Every live conversation in this Neovim: the number the backend knows it by, its name, the
--- tab page showing it, and its chat. One backend serves them all (every message carries the
--- number, agent.rpc.wire adds it), and each conversation keeps running when its chat is not
--- shown.
---
--- A conversation's chat is a copy of its own of the chat modules (`M.FAMILY`: the buffers,
--- the renderer, the status, the queue, the external agent's choices): each is loaded once per
--- conversation, with a `require` that gives the copy's siblings, so everything a chat keeps
--- (its buffers, what is waiting to be written, its timers and autocommands, its queue) is its
--- own by construction. Outside the family, `require("agent.chat")` (and each family name) is a
--- stand-in that reaches the conversation acted for (M.acting: the one whose events are being
--- shown, or whose keys were pressed), else the current tab page's, else the last one used.
--- See doc/decisions/0055-one-chat-per-conversation.md.

local M = {}
local H = {}

--- The modules each conversation has a copy of.
M.FAMILY = {
  "agent.chat",
  "agent.chat.window",
  "agent.chat.render",
  "agent.chat.markdown",
  "agent.chat.status",
  "agent.chat.handlers",
  "agent.chat.queue",
  "agent.choices",
}
H.family = {}
for _, name in ipairs(M.FAMILY) do
  H.family[name] = true
end

---@class agent.Conversation
---@field id integer the number the backend knows it by
---@field name? string its name: the first line of its first prompt, or what :Agent name gave it
---@field named? boolean the name was given (:Agent name), not taken from a prompt
---@field agent string "built-in", or the external agent's name
---@field created integer when it was made (os.time())
---@field tab? integer the tab page showing it
---@field placed? boolean it was shown in a tab page once
---@field chat table its own agent.chat
---@field parts table<string, table> its own copy of each module of M.FAMILY, by name
---@field backend? integer the backend job it was started in (`start` sent)
---@field info? table its `started` event
---@field agent_commands table the external agent's own slash commands
---@field chosen_model? string the model `:Agent model` switched it to (a backend started later
--- starts it with that one)
---@field worktree? { branch?: string } asked to work in a git worktree of its own

H.live = {} ---@type table<integer, agent.Conversation>
H.next = 1
H.acting = nil ---@type integer?
H.last = nil ---@type integer?
-- Run on each conversation made (require("agent") gives its chat what its keys do).
H.made = {} ---@type fun(conversation: agent.Conversation)[]

-- Run when a conversation is made or closed.
H.changed = {} ---@type fun()[]

--- Runs `fn()` each time a conversation is made or closed (what names conversations only when
--- several are open redraws itself).
---@param fn fun()
function M.on_changed(fn)
  H.changed[#H.changed + 1] = fn
end

--- Runs `fn(conversation)` on every conversation made from now on, and on those already live.
---@param fn fun(conversation: agent.Conversation)
function M.on_made(fn)
  H.made[#H.made + 1] = fn
  for _, conversation in ipairs(M.all()) do
    M.acting(conversation.id, fn, conversation)
  end
end

--- Every live conversation, in the order they were made.
---@return agent.Conversation[]
function M.all()
  local all = vim.tbl_values(H.live)
  table.sort(all, function(a, b)
    return a.id < b.id
  end)
  return all
end

--- Conversation `id`, while it lives.
---@param id? integer
---@return agent.Conversation?
function M.get(id)
  return id and H.live[id] or nil
end

--- Makes a conversation (its chat not shown yet). Nil and why past `max_conversations`.
---@return agent.Conversation?
---@return string? err
function M.make()
  local most = require("agent.config").options.max_conversations
  local count = vim.tbl_count(H.live)
  if count >= most then
    return nil,
      ("agent: %d conversations are open, the most `max_conversations` allows; close one with :Agent close (:Agent list shows them) or raise it in setup()"):format(
        count
      )
  end
  local id = H.next
  H.next = H.next + 1
  local conversation = {
    id = id,
    agent = "built-in",
    created = os.time(),
    parts = {},
    agent_commands = {},
  }
  H.live[id] = conversation
  conversation.chat = H.load(conversation, "agent.chat")
  H.last = H.last or id
  for _, fn in ipairs(H.made) do
    M.acting(id, fn, conversation)
  end
  H.redraw()
  return conversation
end

--- Runs `fn(...)` acting for conversation `id`: the stand-ins, and what is sent to the backend,
--- are that conversation's meanwhile.
---@generic T
---@param id integer
---@param fn fun(...): T
---@return T
function M.acting(id, fn, ...)
  local before = H.acting
  H.acting = id
  local result = { xpcall(fn, debug.traceback, ...) }
  H.acting = before
  if not result[1] then
    error(result[2], 0)
  end
  return unpack(result, 2, table.maxn(result))
end

--- The conversation the current tab page shows, if any.
---@param tab? integer a tab page (default the current one)
---@return agent.Conversation?
function M.in_tab(tab)
  tab = (tab == nil or tab == 0) and vim.api.nvim_get_current_tabpage() or tab
  for _, conversation in pairs(H.live) do
    if conversation.tab == tab and vim.api.nvim_tabpage_is_valid(tab) then
      return conversation
    end
  end
  return nil
end

--- The conversation acted for (whose events are being shown, or whose keys were pressed), else
--- the current tab page's; nil when neither.
---@return agent.Conversation?
function M.current()
  return M.get(H.acting) or M.in_tab()
end

--- The conversation acted for: the one whose events are being shown or whose keys were
--- pressed, else the current tab page's, else the last one used; one is made when there is
--- none at all (not shown in any tab page until :Agent). What the stand-ins and the wire reach.
---@return agent.Conversation
function M.active()
  local conversation = M.get(H.acting) or M.in_tab() or M.get(H.last)
  if conversation then
    return conversation
  end
  local first = M.all()[1]
  if first then
    return first
  end
  -- The first conversation is always allowed: max_conversations is at least 1.
  return assert(M.make())
end

--- The current tab page's conversation, made (or the one no tab page shows yet taken) when it
--- has none: what :Agent, ask() and a prompt use. Nil and why past `max_conversations`.
---@return agent.Conversation?
---@return string? err
function M.here()
  local acting = M.get(H.acting)
  if acting then
    return acting
  end
  local tab = vim.api.nvim_get_current_tabpage()
  local conversation = M.in_tab(tab)
  if not conversation then
    -- One never shown yet (made before any tab page asked for one) is taken.
    for _, unshown in ipairs(M.all()) do
      if not unshown.placed then
        conversation = unshown
        break
      end
    end
  end
  if not conversation then
    local err
    conversation, err = M.make()
    if not conversation then
      return nil, err
    end
  end
  M.place(conversation, tab)
  return conversation
end

--- Makes `conversation` the one tab page `tab` shows (the chat of another one shown there is
--- closed; that conversation goes on, unshown).
---@param conversation agent.Conversation
---@param tab integer
function M.place(conversation, tab)
  local before = M.in_tab(tab)
  if before and before ~= conversation then
    before.tab = nil
    H.hide(before, tab)
  end
  conversation.tab = tab
  conversation.placed = true
  H.last = conversation.id
end

--- Notes that `conversation` was used (the stand-ins fall back to it).
---@param conversation agent.Conversation
function M.used(conversation)
  H.last = conversation.id
end

--- Forgets conversation `id` (its chat's buffers deleted). The backend is told by the caller.
---@param id integer
function M.forget(id)
  local conversation = H.live[id]
  if not conversation then
    return
  end
  H.live[id] = nil
  if H.last == id then
    H.last = nil
  end
  local window = conversation.parts["agent.chat.window"]
  for _, buf in ipairs({ window and window.buf, window and window.input_buf }) do
    if buf and vim.api.nvim_buf_is_valid(buf) then
      pcall(vim.api.nvim_buf_delete, buf, { force = true })
    end
  end
  for _, name in ipairs({ "agent.chat.status", "agent.chat.handlers" }) do
    local part = conversation.parts[name]
    if part then
      part.stop()
    end
  end
  -- Its copies' autocommands go with it.
  for _, group in ipairs({ "layout", "below", "markdown", "queue" }) do
    pcall(vim.api.nvim_del_augroup_by_name, ("agent.chat.%s.%d"):format(group, id))
  end
  H.redraw()
end

--- The name shown for `conversation`: its own, else `conversation N`.
---@param conversation agent.Conversation
---@return string
function M.label(conversation)
  return conversation.name or ("conversation " .. conversation.id)
end

--- Names `conversation` from its first prompt, unless it has a name: the prompt's first line,
--- cut to 30 characters.
---@param conversation agent.Conversation
---@param prompt string
function M.name_from(conversation, prompt)
  if conversation.name then
    return
  end
  local line = H.clean(prompt:match("[^\n]*%S[^\n]*") or "")
  if line == "" then
    return
  end
  conversation.name = require("agent.text").cut(line, 30)
  H.named(conversation)
end

--- Gives `conversation` the name `name` (:Agent name).
---@param conversation agent.Conversation
---@param name string
function M.rename(conversation, name)
  conversation.name = require("agent.text").cut(H.clean(name), 40)
  conversation.named = true
  H.named(conversation)
end

--- A stand-in for family module `name` outside the family: reaches the copy of the conversation
--- acted for (M.active) at each use.
---@param name string
---@return table
function M.stand_in(name)
  return setmetatable({}, {
    __index = function(_, key)
      return H.part(M.active(), name)[key]
    end,
    __newindex = function(_, key, value)
      H.part(M.active(), name)[key] = value
    end,
  })
end

-- Helpers ------------------------------------------------------------------------------------

-- `text` as one plain line: control characters and the marks that reorder text on screen
-- (bidirectional overrides and isolates) are spaces, runs of spaces one.
function H.clean(text)
  text = text:gsub("%c", " "):gsub("\226\128[\170-\174]", " "):gsub("\226\129[\166-\169]", " ")
  return vim.trim((text:gsub("%s+", " ")))
end

-- The copy of family module `name` of `conversation`, loaded on first use.
function H.part(conversation, name)
  return conversation.parts[name] or H.load(conversation, name)
end

-- Loads conversation's own copy of family module `name`: the file is run with a `require` that
-- gives the copy's siblings (anything else is the usual require), and with the conversation's
-- number as its second argument (`...`), which tells a family file it is a copy.
function H.load(conversation, name)
  local parts = conversation.parts
  if parts[name] then
    return parts[name]
  end
  local path = H.path(name)
  local chunk = assert(loadfile(path))
  local env = setmetatable({
    require = function(wanted)
      if H.family[wanted] then
        return H.load(conversation, wanted)
      end
      return require(wanted)
    end,
  }, { __index = _G, __newindex = _G })
  setfenv(chunk, env)
  local part = chunk(name, conversation.id)
  parts[name] = part
  return part
end

-- The file of module `name`.
function H.path(name)
  local root = require("agent.paths").root() .. "/lua/" .. name:gsub("%.", "/")
  if vim.uv.fs_stat(root .. ".lua") then
    return root .. ".lua"
  end
  return root .. "/init.lua"
end

-- The chat of `conversation` shown in tab page `tab` is closed there; a window of it that is the
-- tab page's last is given an empty buffer instead (nothing typed there may reach it).
function H.hide(conversation, tab)
  local window = conversation.parts["agent.chat.window"]
  if not (window and vim.api.nvim_tabpage_is_valid(tab)) then
    return
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(tab)) do
    local buf = vim.api.nvim_win_get_buf(win)
    if buf == window.buf or buf == window.input_buf then
      if #vim.api.nvim_tabpage_list_wins(tab) > 1 then
        pcall(vim.api.nvim_win_close, win, false)
      else
        pcall(vim.api.nvim_win_set_buf, win, vim.api.nvim_create_buf(true, false))
      end
    end
  end
end

-- Every chat's winbar again, and whoever asked (M.on_changed): whether they name conversations
-- depends on how many are live.
function H.redraw()
  for _, conversation in ipairs(M.all()) do
    local status = conversation.parts["agent.chat.status"]
    if status then
      M.acting(conversation.id, status.render)
    end
  end
  for _, fn in ipairs(H.changed) do
    fn()
  end
end

-- The name changed: the chat's winbar and the tab labels say it.
function H.named(conversation)
  pcall(vim.cmd.redrawtabline)
  M.acting(conversation.id, function()
    local chat = conversation.chat
    if chat.named then
      chat.named(M.label(conversation))
    end
  end)
end

return M
