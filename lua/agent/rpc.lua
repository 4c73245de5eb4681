--- The channel to the backend: the only file that calls jobstart / rpcnotify.
---
--- Lua → Rust: notifications (`start`, `prompt`, `cancel`, `new`, `decide`), so Neovim never
--- waits on the backend. Rust → Lua: `receive(events)` with a list of event maps at most once a
--- frame, and the buffer queries `buffer_state`, `reload`, `checktime`. The shapes are declared in
--- src/nvim/protocol.rs; keep the two in step and bump PROTOCOL in both when one changes.

local M = {}
local H = {}

--- The protocol this file speaks; a backend announcing another one is stopped, with a message
--- saying how to rebuild it.
M.PROTOCOL = 2

-- The running backend: its channel, the `started` event it sent, the workspace it runs in.
H.job = nil ---@type integer?
H.info = nil ---@type table?
H.workspace = nil ---@type string?
-- Jobs stopped on purpose: their exit is not reported as a failure.
H.stopping = {}

--- The plugin's root: the directory holding lua/ and plugin/.
---@return string
function M.plugin_root()
  local source = debug.getinfo(1, "S").source:sub(2)
  return vim.fn.fnamemodify(source, ":p:h:h:h")
end

--- The backend binary to run, or nil and a message saying how to get one: the `backend` option,
--- else the newer of <plugin>/bin/agent-nvim (put there by :Agent build) and
--- <plugin>/target/release/agent-nvim (a `cargo build --release` run by hand, as scripts/dev.sh
--- does), so a fresh build in a checkout is not shadowed by an older download.
---@return string? path
---@return string? message
function M.backend()
  local root = M.plugin_root()
  local exe = vim.fn.has("win32") == 1 and ".exe" or ""
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
  for _, path in ipairs({ root .. "/bin/agent-nvim" .. exe, root .. "/target/release/agent-nvim" .. exe }) do
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
    ("agent: the backend is not installed (no %s/bin/agent-nvim); run :Agent build to download it (or build it with `cargo build --release` in %s), then try again"):format(
      root,
      root
    )
end

--- The log file the backend writes (`agent-nvim nvim --log FILE`).
---@return string
function M.logfile()
  return vim.fn.stdpath("log") .. "/agent.log"
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

--- The `started` event of the running backend (version, protocol, provider, model, workspace).
---@return table?
function M.info()
  return H.info
end

--- Starts the backend unless it runs, and sends it `start`. On failure shows why and what to do.
---@return boolean running
function M.ensure()
  if H.job then
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
  local log = M.logfile()
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
  H.job, H.info, H.workspace = job, nil, workspace
  require("agent.chat").backend_started()
  local config = require("agent.config").options
  H.notify("start", {
    workspace = workspace,
    provider = config.provider,
    model = config.model,
    base_url = config.base_url,
    auto_approve = config.auto_approve,
    command_timeout = config.command_timeout,
    shell = config.shell,
    max_turns = config.max_turns,
    pass_env = #config.pass_env > 0 and config.pass_env or nil,
    max_edit_mb = config.max_edit_mb,
  })
  return true
end

--- Runs a turn on `text`.
---@param text string
function M.prompt(text)
  H.notify("prompt", { text = text })
end

--- Connects to an external ACP agent; prompts go to it until `new`.
---@param name string
---@param cmd? string[] a configured command (nil: the backend's preset for `name`)
---@param env? table<string, string>
function M.acp(name, cmd, env)
  if not M.ensure() then
    return
  end
  -- An empty Lua table would travel as an array; leave empty ones out.
  H.notify("acp", {
    name = name,
    connect_timeout = require("agent.config").options.acp.connect_timeout,
    cmd = (cmd and #cmd > 0) and cmd or nil,
    env = (env and next(env)) and env or nil,
  })
end

--- Cancels the running turn.
function M.cancel()
  H.notify("cancel")
end

--- Cancels, then starts a fresh conversation (history and session grants forgotten).
function M.new()
  if package.loaded["agent.approval"] then
    require("agent.approval").dismiss_all()
  end
  H.notify("new")
end

--- Answers approval request `id`.
---@param id integer the request's id
---@param decision "allow_once"|"allow_session"|"allow_all"|"refuse"
---@param reason? string with "refuse": passed to the model
---@param option? string the external agent's option id, when it offered its own (ACP)
function M.decide(id, decision, reason, option)
  H.notify("decide", { id = id, decision = decision, reason = reason, option = option })
end

--- Stops the backend (its exit is not reported). The next prompt starts a new one.
function M.shutdown()
  if H.job then
    H.stopping[H.job] = true
    pcall(vim.fn.jobstop, H.job)
    H.job, H.info, H.workspace = nil, nil, nil
    require("agent.chat").backend_stopped()
  end
end

--- Called by Rust with the events of one frame, in order. Each is dispatched to the chat (and
--- the approval picker); the chat writes them to its buffer once, at the end of the batch.
---@param events table[]
function M.receive(events)
  local chat = require("agent.chat")
  chat.begin_batch()
  for _, event in ipairs(events or {}) do
    local ok, err = xpcall(H.dispatch, debug.traceback, event)
    if not ok then
      vim.notify(
        ("agent: could not show a `%s` event (a bug; please report it with :Agent log): %s"):format(
          tostring(type(event) == "table" and event.type),
          err
        ),
        vim.log.levels.ERROR
      )
    end
  end
  chat.end_batch()
end

--- What Rust needs to know before touching `path` (an absolute, resolved path).
---@param path string
---@return { loaded: boolean, modified: boolean }
--- The text of the loaded buffer holding `path` (what an external agent reads through ACP's
--- fs/read_text_file, unsaved changes included), or nil when no buffer holds it.
---@param path string absolute, symlinks resolved
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

function M.buffer_state(path)
  local buf = H.find_buffer(path)
  if not buf then
    return { loaded = false, modified = false }
  end
  local loaded = vim.api.nvim_buf_is_loaded(buf)
  return { loaded = loaded, modified = loaded and vim.bo[buf].modified }
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
    if
      vim.api.nvim_buf_is_loaded(buf)
      and vim.bo[buf].buftype == ""
      and not vim.bo[buf].modified
      and vim.api.nvim_buf_get_name(buf) ~= ""
    then
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

function H.notify(method, arg)
  if not H.job then
    return false
  end
  local ok, err
  if arg == nil then
    ok, err = pcall(vim.rpcnotify, H.job, method)
  else
    ok, err = pcall(vim.rpcnotify, H.job, method, arg)
  end
  if not ok then
    vim.notify(("agent: could not reach the backend (%s); see :Agent log"):format(err), vim.log.levels.ERROR)
  end
  return ok
end

function H.dispatch(event)
  local chat = require("agent.chat")
  local kind = event.type
  if kind == "started" then
    H.info = event
    chat.handle(event)
    if event.protocol ~= M.PROTOCOL then
      chat.error(
        ("agent: the backend speaks protocol %s but this plugin speaks %d; get the matching one with :Agent build (or `cargo build --release` in %s)"):format(
          tostring(event.protocol),
          M.PROTOCOL,
          M.plugin_root()
        )
      )
      M.shutdown()
    end
    return
  end
  chat.handle(event)
  if kind == "turn_started" then
    H.fire("AgentTurnStart", {})
  elseif kind == "turn_done" then
    -- The turn is over: a question still open (or waiting) can no longer be answered.
    if package.loaded["agent.approval"] then
      require("agent.approval").dismiss_all()
    end
    H.fire("AgentTurnDone", {
      outcome = event.outcome,
      input = event.input,
      output = event.output,
      message = event.message,
    })
  elseif kind == "approval" then
    H.fire("AgentApprovalRequest", event)
    -- Out of the RPC request: the picker waits for the user, the backend must not.
    vim.schedule(function()
      require("agent.approval").ask(event, function(decision, reason, option)
        M.decide(event.id, decision, reason, option)
      end)
    end)
  end
end

function H.fire(pattern, data)
  local ok, err = pcall(vim.api.nvim_exec_autocmds, "User", { pattern = pattern, modeline = false, data = data })
  if not ok then
    vim.notify(("agent: a User %s autocommand failed: %s"):format(pattern, err), vim.log.levels.ERROR)
  end
end

function H.on_exit(id, code, stderr)
  if H.stopping[id] then
    H.stopping[id] = nil
    return
  end
  if H.job ~= id or vim.v.exiting ~= vim.NIL then
    return
  end
  local had_started = H.info ~= nil
  H.job, H.info, H.workspace = nil, nil, nil
  local lines = { ("agent: the backend exited (code %d); see :Agent log"):format(code) }
  if not had_started then
    lines[#lines + 1] = ("agent: if the plugin was updated, get the matching backend with :Agent build (or `cargo build --release` in %s)"):format(
      M.plugin_root()
    )
  end
  for _, line in ipairs(stderr) do
    lines[#lines + 1] = line
  end
  require("agent.chat").backend_exited(table.concat(lines, "\n"))
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
