--- :checkhealth agent: Neovim's version, the backend and its version, the configuration, the
--- shell, the sandbox (Landlock's ABI and what is in force), git (which checkpoints need), the
--- provider, base URL and model in use, where the key comes from (never its value), and the
--- clipboard tool images are pasted with.

local M = {}
local H = {}

--- Runs the checks (called by :checkhealth agent).
function M.check()
  local health = vim.health
  health.start("agent.nvim")

  local version = vim.version()
  local version_text = ("%d.%d.%d"):format(version.major, version.minor, version.patch)
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. version_text)
  else
    health.error("Neovim " .. version_text .. " is too old", { "agent.nvim needs Neovim 0.10 or later" })
  end

  local config = require("agent.config")
  if config.did_setup then
    health.ok("setup() was called")
  else
    health.info("setup() was not called: the defaults are in use (that works; see :help agent-setup)")
  end
  if #config.unknown > 0 then
    health.warn(
      "unknown options (ignored): " .. table.concat(config.unknown, ", "),
      { "see :help agent-config for the known ones" }
    )
  else
    health.ok("no unknown options")
  end

  H.backend()
  H.shell(config.options.shell)
  H.sandbox(config.options)
  H.git()
  H.provider(config.options)
  H.keys(config.options)
  H.pass_env(config.options.pass_env)
  H.clipboard(config.options)
  H.mcp_servers(config.options)
  health.info("log file: " .. require("agent.rpc").logfile())
end

-- The MCP servers handed to external agents: names only (their env and headers may hold keys),
-- and whether each stdio server's command is there.
function H.mcp_servers(options)
  local health = vim.health
  local function sorted(servers)
    local list = {}
    for name, server in vim.spairs(type(servers) == "table" and servers or {}) do
      list[#list + 1] = vim.tbl_extend("force", server, { name = name })
    end
    return list
  end
  local owners = { ["setup"] = sorted(options.mcp_servers) }
  for agent, spec in pairs((options.acp or {}).agents or {}) do
    if type(spec) == "table" then
      owners[("acp.agents.%s"):format(agent)] = sorted(spec.mcp_servers)
    end
  end
  local any = false
  for owner, list in vim.spairs(owners) do
    for _, server in ipairs(list) do
      any = true
      if server.command then
        local found = server.command:find("/") and vim.fn.executable(vim.fn.expand(server.command)) == 1
          or vim.fn.executable(server.command) == 1
        if found then
          health.ok(("MCP server %s (%s, stdio): its command is there"):format(server.name, owner))
        else
          health.warn(
            ("MCP server %s (%s, stdio): its command %s is not found"):format(server.name, owner, server.command),
            { "install it or fix its `command`; agents are started without it" }
          )
        end
      else
        health.ok(
          ("MCP server %s (%s, %s): handed to agents that take %s"):format(
            server.name,
            owner,
            server.type or "http",
            server.type or "http"
          )
        )
      end
    end
  end
  if not any then
    health.info("no MCP servers for external agents (mcp_servers; see :help agent-acp-mcp)")
  end
  if options.editor_tools then
    health.ok("editor_tools: external agents are handed agent-nvim-editor, the editor's read-only tools")
  else
    health.info("editor_tools is off: external agents do not get the editor's tools (:help agent-acp-editor-tools)")
  end
end

-- Which command reads the clipboard's image (#clipboard, the paste key), and the paste key.
function H.clipboard(options)
  local health = vim.health
  local argv, why = require("agent.clipboard").command()
  if argv then
    health.ok(("clipboard images: %s (#clipboard and the paste key read them)"):format(table.concat(argv, " ")))
  else
    health.warn(("clipboard images: %s"):format(why), {
      "images attached with @path/to/shot.png still work",
    })
  end
  local picture = require("agent.chat.picture")
  local viewer = picture.viewer()
  if viewer then
    health.ok(("images in the chat are drawn by %s"):format(viewer))
  else
    health.info("images in the chat are rows only (install snacks.nvim's image or image.nvim for pictures)")
  end
  if picture.last_error then
    health.warn(picture.last_error)
  end
  local key = options.keymaps.paste_image
  if key then
    local free = require("agent.chat.window").unshadowed(key, { "i" })
    if #free == 0 then
      health.info(
        ("paste key %s: not mapped in the input, where a mapping of yours has it (keymaps.paste_image)"):format(key)
      )
    end
  end
end

function H.backend()
  local health = vim.health
  local rpc = require("agent.rpc")
  local root = rpc.plugin_root()
  local bin, problem = rpc.backend()
  if not bin then
    health.error(
      problem or "agent: no backend",
      { "run :Agent build (downloads it)", ("or `cargo build --release` in %s"):format(root) }
    )
    return
  end
  local ok, result = pcall(function()
    return vim.system({ bin, "--version" }, { text = true }):wait(5000)
  end)
  local out = ok and result and vim.trim(result.stdout or "") or ""
  if ok and result.code == 0 and out ~= "" then
    health.ok(("backend: %s (%s)"):format(bin, out))
    H.provenance(bin, out)
  else
    health.error(
      ("backend %s does not answer `--version` (%s)"):format(
        bin,
        ok and ("exit " .. tostring(result.code) .. " " .. vim.trim(result.stderr or "")) or tostring(result)
      ),
      { ("run :Agent build (or `cargo build --release` in %s)"):format(root) }
    )
  end
  local info = rpc.info()
  if info then
    health.info(
      ("backend running: protocol %s, workspace %s, sandbox %s"):format(
        tostring(info.protocol),
        tostring(info.workspace),
        tostring(info.sandbox)
      )
    )
    if info.protocol ~= rpc.PROTOCOL then
      health.error(
        ("the backend speaks protocol %s, this plugin %d"):format(tostring(info.protocol), rpc.PROTOCOL),
        { ("run :Agent build (or `cargo build --release` in %s)"):format(root) }
      )
    end
  else
    health.info("backend not running (it starts on first use: :Agent)")
  end
end

--- How the backend got there (the record :Agent build wrote) and whether its version is the
--- plugin's.
---@param bin string the backend in use
---@param version_line string its `--version` ("agent-nvim 0.1.0")
function H.provenance(bin, version_line)
  local health = vim.health
  local install = require("agent.install")
  local installed = install.paths()
  local root = require("agent.rpc").plugin_root()
  local record = install.record()
  if bin ~= installed then
    health.info(
      ("the backend is not the one :Agent build installs (%s): %s"):format(
        installed,
        require("agent.config").options.backend and "`backend` in setup()" or "a `cargo build --release` run by hand"
      )
    )
  elseif not record then
    health.info(("%s has no install record (bin/agent-nvim.json): it was put there by hand"):format(bin))
  elseif record.method == "download" then
    health.ok(
      ("installed by :Agent build: downloaded v%s for %s from %s (sha256 %s checked)"):format(
        tostring(record.version),
        tostring(record.target),
        tostring(record.url),
        tostring(record.sha256)
      )
    )
  else
    health.ok(("installed by :Agent build: built v%s with cargo"):format(tostring(record.version)))
  end
  local version = version_line:match("(%d+%.%d+%.%d+%S*)")
  if version == install.VERSION then
    health.ok(("the backend's version %s is the plugin's"):format(version))
  else
    health.warn(
      ("the backend's version is %s, the plugin's %s"):format(tostring(version), install.VERSION),
      { ("run :Agent build (or `cargo build --release` in %s)"):format(root) }
    )
  end
end

--- Checkpoints (rewind, review) need the `git` binary; without it they are off and the chat
--- says so once.
function H.git()
  local health = vim.health
  local where = vim.fn.stdpath("state") .. "/agent/checkpoints"
  if vim.fn.executable("git") ~= 1 then
    health.warn(
      "git was not found on PATH: checkpoints are off (no rewind, no review of changes)",
      { "install git; the chat works without it" }
    )
    return
  end
  local ok, result = pcall(function()
    return vim.system({ "git", "--version" }, { text = true }):wait(5000)
  end)
  if ok and result.code == 0 then
    health.ok(("%s: checkpoints on, kept in %s"):format(vim.trim(result.stdout or ""), where))
  else
    health.warn("git does not answer `--version`: checkpoints may fail", { "check your git installation" })
  end
end

--- The sandbox run_bash's commands get with these options here, as the backend reports it
--- (`agent-nvim sandbox --json`): Landlock's ABI, the mode in force, where commands may write,
--- and what this kernel cannot enforce. Without Landlock the sandbox is off: a warning, never
--- an error.
---@param options agent.Config
function H.sandbox(options)
  local health = vim.health
  local bin = require("agent.rpc").backend()
  if not bin then
    return
  end
  local sandbox = options.sandbox
  local args = { bin, "sandbox", "--json", "--workspace", require("agent.rpc").workspace(), "--sandbox", sandbox.mode }
  if sandbox.network == false then
    args[#args + 1] = "--no-network"
  end
  for _, path in ipairs(sandbox.writable) do
    vim.list_extend(args, { "--writable", path })
  end
  local ok, result = pcall(function()
    return vim.system(args, { text = true }):wait(5000)
  end)
  local decoded, report = false, nil
  if ok and result.code == 0 then
    decoded, report = pcall(vim.json.decode, result.stdout or "")
  end
  if not decoded or type(report) ~= "table" then
    health.warn(
      "the backend cannot say what the sandbox enforces (`agent-nvim sandbox` failed)",
      { "run :Agent build to get the backend of this plugin's version" }
    )
    return
  end
  if report.abi > 0 then
    health.ok(("Landlock ABI %d"):format(report.abi))
  else
    health.warn("Landlock is not available: commands run without a sandbox")
  end
  if report.mode ~= "off" then
    health.ok("sandbox in force: " .. report.summary)
    health.info("commands may write in: " .. table.concat(report.writable, ", "))
    for _, phrase in ipairs(report.enforced or {}) do
      health.ok("refused to commands: " .. phrase)
    end
    for _, phrase in ipairs(report.not_enforced or {}) do
      health.info("not refused: " .. phrase)
    end
  elseif report.configured == "off" then
    health.info('sandbox: off (sandbox.mode = "off"): commands run as you do')
  else
    health.warn("sandbox: " .. report.summary, { "see :help agent-sandbox" })
  end
  for _, warning in ipairs(report.warnings) do
    health.warn(warning)
  end
  if options.auto_allow_sandboxed then
    if report.whole then
      health.warn(
        "auto_allow_sandboxed: commands run without asking, inside the sandbox",
        { "they can still read your files and, with network = true, send them anywhere" }
      )
    else
      health.warn(
        "auto_allow_sandboxed is set but not in force: the sandbox is not whole here, so commands are asked about"
      )
    end
  end
end

function H.shell(shell)
  local health = vim.health
  if shell then
    if vim.fn.executable(shell) == 1 then
      health.ok(("shell for run_bash: %s (from setup())"):format(shell))
    else
      health.error(
        ("shell for run_bash: %s is not executable"):format(shell),
        { "fix `shell` in setup(), or remove it" }
      )
    end
  elseif vim.fn.executable("bash") == 1 then
    health.ok(("shell for run_bash: bash (%s)"):format(vim.fn.exepath("bash")))
  else
    health.ok("shell for run_bash: /bin/sh (bash is not on PATH)")
  end
end

--- The provider, base URL and model the built-in conversation uses now (the model `:Agent
--- model` switched to included), or would use once the backend starts.
---@param options agent.Config
function H.provider(options)
  local health = vim.health
  local rpc = require("agent.rpc")
  local info = rpc.info()
  if info and info.unavailable then
    health.error(info.unavailable)
  elseif info and info.provider ~= "" then
    health.ok(
      ("provider %s, base URL %s, model %s"):format(
        info.provider,
        tostring(info.base_url),
        rpc.chosen_model() or tostring(info.model)
      )
    )
  else
    health.info(
      ("when the backend starts: provider %s, base URL %s, model %s"):format(
        options.provider or "(the first whose key is set)",
        options.base_url or "(the environment's or the vendor's)",
        rpc.chosen_model() or "(the provider's default)"
      )
    )
  end
end

--- Where the key comes from: setup()'s `api_key` or `api_key_cmd`, else the variables (which
--- are set, never their values).
---@param options agent.Config
function H.keys(options)
  local health = vim.health
  local provider = options.provider
  if provider == "ollama" then
    health.ok("provider ollama needs no key")
    return
  end
  if options.api_key then
    health.ok("the key is api_key in setup() (api_key_cmd keeps it out of your config)")
    return
  end
  if options.api_key_cmd then
    health.ok(
      ("the key is what api_key_cmd prints (%s), run when the first prompt needs it"):format(
        table.concat(options.api_key_cmd, " ")
      )
    )
    return
  end
  local needed = { anthropic = "ANTHROPIC_API_KEY", openai = "OPENAI_API_KEY" }
  local any = false
  local advice = "export %s in the shell and start Neovim again, or set api_key_cmd (or api_key) in setup()"
  for _, name in ipairs({ "ANTHROPIC_API_KEY", "OPENAI_API_KEY" }) do
    local value = vim.env[name]
    if value and value ~= "" then
      any = true
      health.ok(name .. " is set")
    elseif needed[provider] == name then
      health.error(name .. " is not set, and provider is " .. provider, { advice:format(name) })
    else
      health.info(name .. " is not set")
    end
  end
  if not any and not needed[provider] then
    health.warn("no API key is set", {
      advice:format("ANTHROPIC_API_KEY or OPENAI_API_KEY"),
      'or use provider = "ollama", which needs none',
    })
  end
end

function H.pass_env(names)
  if #names == 0 then
    vim.health.ok("run_bash's commands get no API key variable")
  else
    vim.health.warn(
      ("run_bash's commands get %s (pass_env): commands the model runs can use these keys"):format(
        table.concat(names, ", ")
      ),
      { "remove them from pass_env unless a command needs them (see :help agent-keys)" }
    )
  end
end

return M
