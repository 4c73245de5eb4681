--- The backend job: which binary, starting it (`agent-nvim nvim` as an RPC child, then a
--- `start` notification for each conversation it serves), stopping it, and telling the chats
--- when it exits by itself.

local paths = require("agent.paths")
local wire = require("agent.rpc.wire")

local M = {}
local H = {}

-- The running backend: its channel and the workspace it runs in (each conversation keeps the
-- `started` event it was sent).
H.job = nil ---@type integer?
H.workspace = nil ---@type string?
-- Jobs stopped on purpose: their exit is not reported as a failure.
H.stopping = {}

--- The backend binary to run, or nil and a message saying how to get one: the `backend` option,
--- else the newer of the one :Agent build installs (<plugin>/bin/agent-nvim) and the one a
--- `cargo build --release` in the plugin's directory makes (as scripts/dev.sh does), so a fresh
--- build in a checkout is not shadowed by an older download.
---@return string? path
---@return string? message
function M.backend()
  local root = paths.root()
  local configured = require("agent.config").options.backend
  if configured then
    local path = vim.fn.expand(configured)
    if vim.fn.executable(path) == 1 then
      return path
    end
    return nil,
      ("agent: `backend` is %s, which is not an executable file; fix the path in setup(), or remove it and run :Agent build (or `cargo build --release` in %s)"):format(
        path,
        root
      )
  end
  local newest, newest_time
  for _, path in ipairs({ (paths.installed()), paths.built() }) do
    local stat = vim.fn.executable(path) == 1 and vim.uv.fs_stat(path)
    if stat then
      local time = stat.mtime.sec + stat.mtime.nsec / 1e9
      if not newest or time > newest_time then
        newest, newest_time = path, time
      end
    end
  end
  if newest then
    return newest
  end
  return nil,
    ("agent: the backend is not installed (no %s); run :Agent build to download it (or build it with `cargo build --release` in %s), then try again"):format(
      (paths.installed()),
      root
    )
end

--- The workspace: the running backend's, else the one a backend started now would get.
---@return string
function M.workspace()
  if H.workspace then
    return H.workspace
  end
  local configured = require("agent.config").options.workspace
  local dir = configured and vim.fn.fnamemodify(vim.fn.expand(configured), ":p") or vim.fn.getcwd()
  if #dir > 1 then
    dir = dir:gsub("/+$", "")
  end
  return dir
end

--- True while a backend process is running.
---@return boolean
function M.running()
  return H.job ~= nil
end

--- The `started` event of the conversation acted for (version, protocol, provider, model,
--- workspace), once the backend has sent it.
---@return table?
function M.info()
  local conversation = require("agent.conversations").active()
  return conversation.backend == H.job and conversation.info or nil
end

--- Records the `started` event of the conversation acted for.
---@param event table
function M.started(event)
  require("agent.conversations").active().info = event
end

--- Starts the backend unless it runs, and sends it `start` for the conversation acted for
--- unless it was sent. On failure shows why and what to do.
---@return boolean running
function M.ensure()
  local conversation = require("agent.conversations").active()
  if H.job then
    if conversation.backend ~= H.job then
      H.start(conversation)
    end
    return true
  end
  local bin, problem = M.backend()
  if not bin then
    vim.notify(problem, vim.log.levels.ERROR)
    return false
  end
  local workspace = M.workspace()
  if vim.fn.isdirectory(workspace) == 0 then
    vim.notify(
      ("agent: the workspace %s is not a directory; set `workspace` in setup() to one, or :cd to it"):format(workspace),
      vim.log.levels.ERROR
    )
    return false
  end
  local log = paths.logfile()
  vim.fn.mkdir(vim.fn.fnamemodify(log, ":h"), "p")
  local stderr = {}
  local ok, job = pcall(vim.fn.jobstart, { bin, "nvim", "--log", log }, {
    rpc = true,
    cwd = workspace,
    on_stderr = function(_, data)
      H.keep_tail(stderr, data)
    end,
    on_exit = function(id, code)
      H.on_exit(id, code, stderr)
    end,
  })
  if not ok or type(job) ~= "number" or job <= 0 then
    vim.notify(
      ("agent: could not start the backend %s (%s); see :checkhealth agent"):format(bin, ok and job or tostring(job)),
      vim.log.levels.ERROR
    )
    return false
  end
  H.job, H.workspace = job, workspace
  wire.attach(job)
  H.start(conversation)
  return true
end

--- Stops the backend (its exit is not reported). The next prompt starts a new one.
function M.shutdown()
  if H.job then
    H.stopping[H.job] = true
    pcall(vim.fn.jobstop, H.job)
    H.forget()
    H.each_chat(function(chat)
      chat.backend_stopped()
    end)
  end
end

--- Tells the backend that conversation `id` is over (its turn stopped, its agent ended).
---@param id integer
function M.close(id)
  local conversation = require("agent.conversations").get(id)
  if H.job and conversation and conversation.backend == H.job then
    wire.notify(wire.method.CLOSE, { conversation = id })
  end
end

-- Helpers ------------------------------------------------------------------------------------

-- Sends `start` for `conversation`: its session is configured with setup()'s options.
function H.start(conversation)
  conversation.backend, conversation.info = H.job, nil
  local config = require("agent.config").options
  require("agent.conversations").acting(conversation.id, function()
    require("agent.chat").backend_started()
    H.send_start(config, conversation)
  end)
end

function H.send_start(config, conversation)
  local worktree = conversation.worktree
  wire.notify(wire.method.START, {
    worktree = worktree
        and { branch = worktree.branch, dir = config.worktree_dir and vim.fn.expand(config.worktree_dir) }
      or nil,
    workspace = H.workspace,
    provider = config.provider,
    -- The model `:Agent model` switched this conversation to: a backend started later starts
    -- it with that one.
    model = conversation.chosen_model or config.model,
    base_url = config.base_url,
    -- The key goes to the backend over its stdin, never into its environment or argv; the
    -- command is run by the backend, when the first prompt needs the key.
    api_key = config.api_key,
    api_key_cmd = config.api_key_cmd,
    auto_approve = config.auto_approve,
    command_timeout = config.command_timeout,
    shell = config.shell,
    max_turns = config.max_turns,
    max_cost = config.max_cost,
    pass_env = #config.pass_env > 0 and config.pass_env or nil,
    max_edit_mb = config.max_edit_mb,
    state_dir = vim.fn.stdpath("state") .. "/agent",
    permissions = config.permissions,
    sandbox = {
      mode = config.sandbox.mode,
      network = config.sandbox.network,
      writable = #config.sandbox.writable > 0 and config.sandbox.writable or nil,
    },
    auto_allow_sandboxed = config.auto_allow_sandboxed,
    instructions = config.instructions == false and {} or config.instructions,
    thinking = config.thinking == false and 0 or (type(config.thinking) == "table" and config.thinking.budget or nil),
    reasoning_effort = type(config.reasoning) == "table" and config.reasoning.effort or nil,
    openai_api = config.openai and config.openai.api or nil,
    compact_at = config.compact_at == false and 0 or config.compact_at,
    keep_turns = config.keep_turns,
    models = H.model_entries(config.models),
  })
end

-- Runs fn(chat) for every conversation's chat, acting for it.
function H.each_chat(fn)
  local conversations = require("agent.conversations")
  for _, conversation in ipairs(conversations.all()) do
    conversations.acting(conversation.id, fn, conversation.chat)
  end
end

--- setup()'s `models` entries by name (the list of names stays here, for :Agent model); nil
--- when there are none (an empty table would go as a list).
function H.model_entries(models)
  local entries
  for name, entry in pairs(models or {}) do
    if type(name) == "string" and type(entry) == "table" then
      entries = entries or {}
      entries[name] = entry
    end
  end
  return entries
end

function H.forget()
  H.job, H.workspace = nil, nil
  for _, conversation in ipairs(require("agent.conversations").all()) do
    conversation.backend, conversation.info = nil, nil
  end
  wire.attach(nil)
  -- Inline edits hear nothing more from a backend that is gone.
  if package.loaded["agent.inline"] then
    require("agent.inline").backend_gone()
  end
end

function H.on_exit(id, code, stderr)
  -- An agent's questions open now can no longer be answered: their floats close.
  if (H.job == id or H.stopping[id]) and package.loaded["agent.elicit"] then
    require("agent.elicit").forget_all()
  end
  if H.stopping[id] then
    H.stopping[id] = nil
    return
  end
  if H.job ~= id or vim.v.exiting ~= vim.NIL then
    return
  end
  local had_started = false
  for _, conversation in ipairs(require("agent.conversations").all()) do
    had_started = had_started or (conversation.backend == id and conversation.info ~= nil)
  end
  H.forget()
  local lines = { ("agent: the backend exited (code %d); see :Agent log"):format(code) }
  if not had_started then
    lines[#lines + 1] = ("agent: if the plugin was updated, get the matching backend with :Agent build (or `cargo build --release` in %s)"):format(
      paths.root()
    )
  end
  for _, line in ipairs(stderr) do
    lines[#lines + 1] = line
  end
  local message = table.concat(lines, "\n")
  H.each_chat(function(chat)
    chat.backend_exited(message)
  end)
end

-- Keeps the last lines a job wrote to stderr (the log has the rest).
function H.keep_tail(tail, data)
  for _, line in ipairs(data) do
    if line ~= "" then
      tail[#tail + 1] = line
      if #tail > 10 then
        table.remove(tail, 1)
      end
    end
  end
end

return M
