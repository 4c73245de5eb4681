--- The wire to the backend: the only place that calls vim.rpcnotify (and vim.rpcrequest, for the
--- requests the plugin sends: `sessions` and `rewind_points`, which answer at once, and the
--- review's `changes` and `file_at`, which a person waits for anyway). Lua → Rust messages are
--- notifications, so Neovim never waits on the backend; their names and shapes are declared in
--- src/front/nvim/protocol.rs (`method`, and the struct each one carries). Every message but
--- `decide`, `inline_answer`, `elicit_answer` and `proposal` (whose question knows its conversation) carries `conversation`: the
--- number of the conversation acted for (lua/agent/conversations.lua), added here (nor
--- `conversations`, which asks about them all).

local M = {}
local H = {}

--- The notification names (protocol.rs `method`).
M.method = {
  START = "start",
  PROMPT = "prompt",
  CANCEL = "cancel",
  NEW = "new",
  DECIDE = "decide",
  ACP = "acp",
  RESUME = "resume",
  REWIND = "rewind",
  FILES = "files",
  COMPACT = "compact",
  CHOOSE = "choose",
  CLOSE = "close",
  INLINE = "inline",
  INLINE_STOP = "inline_stop",
  INLINE_ANSWER = "inline_answer",
  BTW = "btw",
  RENAME = "rename",
  BRANCH = "branch",
  ELICIT_ANSWER = "elicit_answer",
}

--- The request names (protocol.rs `request`).
M.request_name = {
  SESSIONS = "sessions",
  REWIND_POINTS = "rewind_points",
  CHANGES = "changes",
  FILE_AT = "file_at",
  PERMISSIONS = "permissions",
  PROPOSAL = "proposal",
  MODEL = "model",
  MODELS = "models",
  ATTACH = "attach",
  WORKTREE = "worktree",
  CONVERSATIONS = "conversations",
  EXPORT = "export",
  SESSION_RENAME = "session_rename",
  SESSION_DELETE = "session_delete",
  FORK = "fork",
  ADOPT = "adopt",
  PROMPT_TEXT = "prompt_text",
  UNDO_OUTSIDE = "undo_outside",
}

--- For tests: when a table, each notification sent is also appended to it as
--- `{ method = name, arg = map }` (`arg` absent for the ones without one), exactly as it went.
---@type { method: string, arg?: table }[]?
M.recorded = nil

H.channel = nil ---@type integer?

--- Sends from now on to the job `channel` (nil: nowhere).
---@param channel? integer
function M.attach(channel)
  H.channel = channel
end

--- Sends notification `method` with `arg` (one map, or nil for none). False, after saying why,
--- when it could not be sent; false without a word when no backend runs.
---@param method string one of M.method
---@param arg? table
---@return boolean sent
function M.notify(method, arg)
  if not H.channel then
    return false
  end
  arg = H.addressed(
    method ~= M.method.DECIDE and method ~= M.method.INLINE_ANSWER and method ~= M.method.ELICIT_ANSWER,
    arg
  )
  local ok, err = H.call(vim.rpcnotify, method, arg)
  if not ok then
    vim.notify(("agent: could not reach the backend (%s); see :Agent log"):format(err), vim.log.levels.ERROR)
  elseif M.recorded then
    table.insert(M.recorded, { method = method, arg = arg })
  end
  return ok
end

--- Sends request `method` (with `arg`, one map, or none) and returns its answer, or nil and the
--- error (the backend's message, or that none runs).
---@param method string one of M.request_name
---@param arg? table
---@return any? answer
---@return string? err
function M.request(method, arg)
  if not H.channel then
    return nil, "agent: the backend is not running"
  end
  arg = H.addressed(method ~= M.request_name.PROPOSAL and method ~= M.request_name.CONVERSATIONS, arg)
  local ok, answer = H.call(vim.rpcrequest, method, arg)
  if not ok then
    -- Neovim puts `Error invoking 'changes' on channel 3 (...):` before the backend's message.
    local message = tostring(answer):gsub("^.-Error invoking '[^']*' on channel [^\n]*\n", "", 1)
    return nil, message
  end
  return answer
end

-- `arg` with the number of the conversation acted for, when `addressed`.
function H.addressed(addressed, arg)
  if not addressed then
    return arg
  end
  arg = arg or {}
  if arg.conversation == nil then
    arg.conversation = require("agent.conversations").active().id
  end
  return arg
end

-- `send(channel, method[, arg])` in pcall: a message without an argument goes without one.
function H.call(send, method, arg)
  if arg == nil then
    return pcall(send, H.channel, method)
  end
  return pcall(send, H.channel, method, arg)
end

return M
