--- Configuration: the defaults, merging the user's options over them, and validation.
---
--- Every field is checked with its dotted path in the message, so a mistake in a nested table
--- says exactly where it is ("agent: `keymaps.ask` should be string or false, got number").
--- Unknown keys are warned about (and listed by `:checkhealth agent`), never silently dropped.

local M = {}
local H = {}

--- The defaults, one literal table. Keys whose default is nil are listed here commented, and
--- declared in `H.schema` below, which is the list of every key that exists.
---@class agent.McpServer
---@field command? string a stdio server's program (a name on PATH, or a path)
---@field args? string[]
---@field env? table<string, string> never logged or saved
---@field url? string a remote server's address
---@field headers? table<string, string> never logged or saved
---@field type? "http"|"sse" a remote server's transport (default "http")

---@class agent.Config
---@field provider? string
---@field model? string
---@field base_url? string
---@field api_key? string
---@field api_key_cmd? string[]
---@field auto_approve boolean
---@field notify_command? string[] run with the message when a turn ends unseen (:help agent-notify)
---@field live_lines integer
---@field follow boolean
---@field command_timeout number
---@field workspace? string
---@field shell? string
---@field max_turns integer
---@field max_conversations integer how many conversations may be open at once
---@field worktree_dir? string where :Agent new --worktree makes worktrees
---@field tabline boolean name conversations in the tab labels while several are open
---@field max_cost? number the most a conversation may cost, in dollars (by the model table's prices)
---@field pass_env string[]
---@field max_edit_mb integer
---@field backend? string
---@field keymaps { ask: string|false, approve: string|false, edit: string|false, approval: table<string, string|string[]>, chat: { output: string|false, undo: string|false, fork: string|false }, diff: { revert: string|false }, btw: { to_input: string|false }, inline: table<string, string|false> }
---@field approval { delay: integer, typing: integer }
---@field window { side: "right"|"left", width: number }
---@field input { completion: boolean|"auto" }
---@field acp { agents: table<string, { cmd?: string[], env?: table<string, string>, sandbox?: boolean, directories?: (string|{ path: string, writable?: boolean })[], worktree?: boolean, mcp_servers?: table<string, agent.McpServer> }>, connect_timeout: number }
---@field mcp_servers table<string, agent.McpServer> MCP servers handed to every external agent (:help agent-acp-mcp)
---@field editor_tools boolean hand external agents the editor's read-only tools (:help agent-acp-editor-tools)
---@field permissions { allow: string[], ask: string[], deny: string[] }
---@field sandbox { mode: "workspace-write"|"read-only"|"off", network: boolean, writable: string[] }
---@field auto_allow_sandboxed boolean
---@field instructions string[]|false
---@field models table<integer|string, string|table>
---@field images { clipboard?: string[] }
---@field thinking? false|{ budget: integer }
---@field reasoning? { effort?: "minimal"|"low"|"medium"|"high" }
---@field openai { api?: "chat"|"responses" }
---@field compact_at number|false
---@field keep_turns integer
---@field ask { context_lines: integer }
---@field inline { context_lines: integer, provider?: string, model?: string }
---@field render boolean
H.defaults = {
  -- provider = nil,      -- "anthropic" | "openai" | "ollama"; nil: the first whose API key is set
  -- model = nil,         -- model name; nil: the provider's default
  -- base_url = nil,      -- endpoint; nil: the environment's or the vendor's
  -- api_key = nil,       -- the provider's key, over its variable (api_key_cmd keeps it out of
  --                         your config)
  -- api_key_cmd = nil,   -- a command that prints the key, run by the backend when the first
  --                         prompt needs it: { "pass", "show", "anthropic" }
  auto_approve = false, -- allow every edit and command without asking (think twice)
  -- notify_command = nil, -- run with the message when a turn ends unseen: { "notify-send", "agent.nvim" }
  live_lines = 5, -- how many of a running command's newest output lines its chat row shows
  follow = false, -- open the files the agent reads and edits in the other window (:help agent-follow)
  command_timeout = 120, -- run_bash timeout, in seconds; the whole process tree is killed after it
  -- workspace = nil,     -- the root the agent may touch; nil: Neovim's current directory when the
  --                         conversation starts
  -- shell = nil,         -- shell for run_bash; nil: bash when on PATH, else /bin/sh
  max_turns = 40, -- cap on model calls for one prompt
  max_conversations = 8, -- how many conversations may be open at once (:help agent-conversations)
  tabline = true, -- while several are open, name them in the tab labels (unless 'tabline' is set)
  -- worktree_dir = nil,  -- where :Agent new --worktree makes worktrees; nil: stdpath("state")/agent/worktrees
  -- max_cost = nil,      -- the most a conversation may cost, in dollars by the model table's
  --                         prices (:help agent-cost); nil: no limit
  pass_env = {}, -- variables run_bash's commands get anyway ({ "OPENAI_API_KEY", "DISPLAY" }); by
  --                default they get no API key (nor a copy of one) and none of the session's
  --                sockets: NVIM, TMUX, SSH_AUTH_SOCK, DBUS_SESSION_BUS_ADDRESS, DISPLAY, ...
  max_edit_mb = 64, -- the largest file edit_file (and an external agent's file requests) will handle
  -- backend = nil,       -- path to agent-nvim; nil: the newer of <plugin root>/bin/agent-nvim
  --                         (:Agent build) and <plugin root>/target/release/agent-nvim
  keymaps = {
    ask = "<leader>aa", -- ask about the current line or the selection; false: no mapping
    approve = "<M-a>", -- in the input and the chat: go to the waiting question (also :Agent approve)
    approval = { -- keys in the approval picker (buffer-local to it)
      allow_once = { "1", "y" }, -- this call only
      allow_session = { "2" }, -- edits to any file / this exact command line, until :Agent new
      --                          (a lasting grant: pressed twice, as are the two below)
      allow_project = { "a" }, -- always in this workspace: this exact command line / every edit
      --                          (saved; :Agent permissions lists and removes them)
      allow_all = { "3" }, -- everything, until :Agent new
      edit = { "e" }, -- change the proposal (the edit or the command) before allowing it
      refuse = { "4", "n" },
      hide = "<Esc>", -- hide the question without answering it; it waits (keymaps.approve)
      refuse_with_reason = { "r" }, -- asks for the reason, which the agent reads
      select = "<CR>", -- the highlighted choice (Allow once unless you moved with j/k)
      next_hunk = "]", -- a diff's next hunk (the hunk keys' place)
      prev_hunk = "[", -- its previous hunk
      drop_hunk = "x", -- drop that hunk, or keep it again: allowing once writes the kept ones
      scroll_down = "<C-d>", -- scroll the preview
      scroll_up = "<C-u>",
    },
    chat = { -- keys in the chat buffer
      output = "gO", -- on a finished command's row: its whole output, as the model read it; false: none
      undo = "u", -- on an edit's row: undo that one edit, when the file has not changed since; false: none
      fork = "s", -- on a prompt: fork the conversation from before it (a new tab page); false: none
      edit = "e", -- on a prompt: put its text in the input; sending it starts a new branch there
      regenerate = "r", -- on the last answer: ask for it again, as a new branch
      branch_prev = "[", -- on a prompt with branches: the branch before (:help agent-branches)
      branch_next = "]", -- the branch after
    },
    btw = { -- keys in a side question's float (:Agent btw); q and <Esc> close it
      to_input = "y", -- put the answer in the chat's input; false: no key
    },
    diff = { -- keys in :Agent diff's view (in the file's buffer, while the view shows it)
      revert = "gs", -- take the change under the cursor back to the checkpoint's version; false: none
    },
    paste_image = "<C-v>", -- in the input (Insert mode): paste the clipboard's image
    --                         (:help agent-images); not mapped over a mapping of yours; false: none
    edit = "<leader>ae", -- edit the selection, or the function (treesitter) or line at the cursor, in
    --                       place (:Agent edit); false: no mapping
    inline = { -- keys in a buffer while an inline edit's proposal is open (buffer-local, then removed);
      --          false for one: no key for it
      keep = "ga", -- keep the hunk under the cursor
      drop = "gs", -- drop it
      keep_all = "gA", -- keep every hunk not decided yet
      drop_all = "gS", -- drop every hunk not decided yet
      next = "]h", -- the next hunk not decided yet
      prev = "[h", -- the previous one
      help = "?", -- list these keys
      stop = "<C-c>", -- stop the edit (also while the model writes); nothing more is applied
    },
  },
  permissions = { -- rules judged before anyone is asked (see :help agent-permissions)
    allow = {}, -- run without asking: { "run_bash(git status)", "run_bash(cargo test *)", "edit_file(src/**)" }
    ask = {}, -- always ask, even when this session allowed it already
    deny = {}, -- never run, not even with auto_approve: { "run_bash(rm *)", "edit_file(.env)" }
  },
  sandbox = { -- what run_bash's commands may write, enforced by Landlock on Linux (see :help agent-sandbox)
    mode = "workspace-write", -- write only in the workspace, the temp directory and `writable`;
    --                           "read-only": nowhere but /dev/null and the temp directory; "off"
    network = true, -- false: block TCP connect and bind (Landlock ABI 4, Linux 6.7)
    writable = {}, -- more places commands may write: { "~/.cache", "~/.cargo/registry" }
  },
  approval = {
    delay = 500, -- ms after the picker takes focus during which its keys do nothing (a key
    --              meant for something else answers nothing)
    typing = 1000, -- ms after a key typed elsewhere during which a question does not take focus
    --               (nor in Insert or Command-line mode): it is shown and waits for you
  },
  auto_allow_sandboxed = false, -- run commands without asking while the sandbox is in force (edits
  --                               are still asked about; permission rules still apply)
  instructions = { "AGENTS.md", "CLAUDE.md" }, -- the project's instructions: the first of these at
  --                                            the workspace root goes into the system prompt,
  --                                            read again before each prompt; false: none
  models = {}, -- what :Agent model offers besides the provider's default: { "claude-opus-4-1" };
  --              a model's settings go under its name (over the built-in table, :help agent-models):
  --              { ["my-model"] = { context = 32000, price = { input = 3, output = 15 },
  --                                 images = false } } (false: it reads text only)
  -- thinking = nil,      -- Anthropic extended thinking: { budget = 8000 } tokens, or false; nil:
  --                         8000 for the models that think (Claude 4 and 3.7), off for the others
  -- reasoning = nil,     -- OpenAI reasoning: { effort = "low" | "medium" | "high" }; nil: the model's
  compact_at = 0.8, -- compact the conversation's older part once a request's input reached this share
  --                   of the model's window (:help agent-compact); false: only :Agent compact and
  --                   a request refused as too long
  keep_turns = 4, -- the latest prompt-answer pairs a compaction keeps as they are
  openai = {
    -- api = nil,         -- "chat" (Chat Completions) or "responses" (the Responses API); nil:
    --                       Chat Completions, except for the models served only through Responses
  },
  ask = {
    context_lines = 20, -- lines before and after the cursor line the ask mapping sends
  },
  images = { -- images in prompts (:help agent-images)
    -- clipboard = nil,   -- the command that prints the clipboard's image: { "wl-paste", "--type",
    --                       "image/png" }; nil: the first of wl-paste, xclip, pngpaste,
    --                       osascript found (:checkhealth agent says which)
  },
  inline = { -- inline edits (:Agent edit, :help agent-inline)
    context_lines = 20, -- lines before and after the range sent with it
    -- provider = nil,    -- another provider for these edits ("anthropic", "openai", "ollama"); nil:
    --                       the conversation's
    -- model = nil,       -- another model for them (a fast one); nil: the conversation's (or the
    --                       provider's default, with another provider)
  },
  render = true, -- highlight the chat as markdown (headings, emphasis, code blocks in their language);
  --                false: plain text (your own markdown plugins still see filetype markdown)
  window = {
    side = "right", -- where the conversation split opens: "right" or "left"
    width = 80, -- columns, or a fraction of the screen's width (0.4)
  },
  input = {
    -- The input's menu opens by itself after @, # and a leading / (Neovim 0.11): "auto" unless
    -- our blink.cmp or nvim-cmp source is in use (that plugin's menu shows our items), true
    -- always, false never (<C-x><C-o> only).
    completion = "auto",
  },
  -- MCP servers handed to every external agent's sessions, by name: { command = "...", args =
  -- { ... }, env = { ... } } or { url = "...", headers = { ... }, type = "http"|"sse" } (see
  -- :help agent-acp-mcp); an agent's own (acp.agents.NAME.mcp_servers) go over these by name.
  mcp_servers = {},
  -- Hand every external agent agent.nvim's own MCP server (`agent-nvim mcp`): read-only tools
  -- answered from this Neovim (diagnostics, open buffers, the selection, LSP definition,
  -- references, hover, symbols), inside the workspace (see :help agent-acp-editor-tools).
  editor_tools = false,
  acp = {
    agents = {}, -- external ACP agents by name: { name = { cmd = { ... }, env = { ... }, sandbox = true } }
    connect_timeout = 60, -- seconds an external agent may take to answer `initialize`
  },
}

-- Validators. Each returns true or the expectation text used in the message.
local function optional_string(v)
  return v == nil or type(v) == "string" or "string or nil"
end
local function boolean(v)
  return type(v) == "boolean" or "boolean"
end
local function positive_number(v)
  return (type(v) == "number" and v > 0) or "a positive number"
end
local function optional_positive_number(v)
  return v == nil or (type(v) == "number" and v > 0) or "a positive number or nil"
end
local function positive_integer(v)
  return (type(v) == "number" and v >= 1 and math.floor(v) == v) or "a positive integer"
end
local function key(v)
  return (type(v) == "string" and v ~= "") or "a key (string)"
end
function H.milliseconds(v)
  return (type(v) == "number" and v >= 0 and math.floor(v) == v) or "a whole number of milliseconds (0: none)"
end
function H.key_or_false(v)
  return (type(v) == "string" and v ~= "") or v == false or "a key (string) or false"
end
function H.key_list(v)
  if type(v) ~= "table" then
    return "a list of keys"
  end
  for _, k in ipairs(v) do
    if type(k) ~= "string" or k == "" then
      return "a list of keys"
    end
  end
  return true
end
--- A list of permission rules, each `run_bash(PATTERN)` or `edit_file(GLOB)`. The backend reads
--- them again (globs included) and starts nothing with a rule it cannot read.
function H.rule_list(v)
  if type(v) ~= "table" or (next(v) ~= nil and not vim.islist(v)) then
    return 'a list of rules like "run_bash(git status)" or "edit_file(src/**)"'
  end
  return true
end

--- The message for the first rule of `rules` (in list `path`) that is not `tool(pattern)` with
--- tool run_bash or edit_file; nil when every rule has that form.
function H.rule_problem(path, rules)
  for _, rule in ipairs(rules) do
    local text = type(rule) == "string" and vim.trim(rule) or vim.inspect(rule)
    local tool, inner = text:match("^([%w_]+)%((.*)%)$")
    local why
    if type(rule) ~= "string" or not tool then
      why = "write run_bash(PATTERN) or edit_file(GLOB)"
    elseif tool ~= "run_bash" and tool ~= "edit_file" then
      why = ("there is no tool '%s'; rules are for run_bash and edit_file"):format(tool)
    elseif vim.trim(inner) == "" then
      why = "the pattern inside the parentheses is empty"
    end
    if why then
      return ("agent: the rule '%s' in %s: %s"):format(text, path, why)
    end
  end
end

function H.name_list(v)
  if type(v) ~= "table" then
    return "a list of environment variable names"
  end
  for i, name in pairs(v) do
    if type(i) ~= "number" or type(name) ~= "string" or not name:match("^[%w_]+$") then
      return "a list of environment variable names"
    end
  end
  return true
end
local function table_(v)
  return type(v) == "table" or "a table"
end
--- A list of paths (`~` is the home directory).
function H.path_list(v)
  if type(v) ~= "table" or (next(v) ~= nil and not vim.islist(v)) then
    return 'a list of paths like { "~/.cache" }'
  end
  for _, path in ipairs(v) do
    if type(path) ~= "string" or path == "" then
      return 'a list of paths like { "~/.cache" }'
    end
  end
  return true
end

--- A list of names (file names, model names), each a non-empty string on one line.
function H.string_list(v)
  if type(v) ~= "table" or (next(v) ~= nil and not vim.islist(v)) then
    return "a list of names"
  end
  for _, name in ipairs(v) do
    if type(name) ~= "string" or vim.trim(name) == "" or name:find("[%c]") then
      return "a list of names"
    end
  end
  return true
end

--- One model's settings: `context` (tokens) and `price` (dollars per million tokens).
function H.model_entry(value)
  if type(value) ~= "table" then
    return false
  end
  for field, v in pairs(value) do
    if field == "context" then
      if not (type(v) == "number" and v >= 1 and math.floor(v) == v) then
        return false
      end
    elseif field == "price" then
      if type(v) ~= "table" or type(v.input) ~= "number" or type(v.output) ~= "number" then
        return false
      end
      for name, n in pairs(v) do
        local known = name == "input" or name == "output" or name == "cache_write" or name == "cache_read"
        if not known or type(n) ~= "number" or n < 0 or n ~= n or n == math.huge then
          return false
        end
      end
    elseif field == "images" then
      if type(v) ~= "boolean" then
        return false
      end
    else
      return false
    end
  end
  return true
end

--- `models`: names (the list part) and settings by name (`["name"] = { ... }`).
function H.models(v)
  local expected = 'a list of model names, and settings by name: { "claude-opus-4-1", ["m"] = { context = 32000, '
    .. "price = { input = 3, output = 15, cache_write = 3.75, cache_read = 0.3 }, images = false } }"
  if type(v) ~= "table" then
    return expected
  end
  for key, value in pairs(v) do
    local ok
    if type(key) == "number" then
      ok = type(value) == "string" and vim.trim(value) ~= "" and not value:find("[%c%s]")
    else
      ok = type(key) == "string" and key ~= "" and H.model_entry(value)
    end
    if not ok then
      return expected
    end
  end
  return true
end

function H.thinking(v)
  if v == nil or v == false then
    return true
  end
  local ok = type(v) == "table"
    and type(v.budget) == "number"
    and v.budget >= 1024
    and math.floor(v.budget) == v.budget
    and next(v, next(v)) == nil
  return ok or "false or { budget = N } with N a whole number of tokens, at least 1024"
end

function H.reasoning(v)
  if v == nil then
    return true
  end
  local efforts = { minimal = true, low = true, medium = true, high = true }
  local ok = type(v) == "table" and efforts[v.effort] and next(v, next(v)) == nil
  return ok or '{ effort = "minimal" | "low" | "medium" | "high" }'
end

function H.instructions(v)
  if v == false then
    return true
  end
  local ok = H.string_list(v)
  return ok == true or 'a list of file names like { "AGENTS.md" }, or false'
end

--- Every known key by dotted path. A table-valued entry's children are checked below it.
H.schema = {
  provider = optional_string,
  model = optional_string,
  base_url = optional_string,
  api_key = optional_string,
  api_key_cmd = function(v)
    if v == nil then
      return true
    end
    local ok = H.string_list(v)
    return (ok == true and #v > 0) or 'a command as a list of words like { "pass", "show", "anthropic" }'
  end,
  auto_approve = boolean,
  notify_command = function(v)
    if v == nil then
      return true
    end
    local ok = H.string_list(v)
    return (ok == true and #v > 0) or 'a list of words like { "notify-send", "agent.nvim" }'
  end,
  command_timeout = positive_number,
  live_lines = function(v)
    return (type(v) == "number" and v >= 0 and math.floor(v) == v) or "a whole number of lines (0: none)"
  end,
  follow = boolean,
  workspace = optional_string,
  shell = optional_string,
  max_turns = positive_integer,
  max_conversations = positive_integer,
  worktree_dir = optional_string,
  tabline = boolean,
  max_cost = optional_positive_number,
  pass_env = H.name_list,
  max_edit_mb = positive_integer,
  backend = optional_string,
  keymaps = table_,
  ["keymaps.ask"] = function(v)
    return (type(v) == "string" and v ~= "") or v == false or "string or false"
  end,
  ["keymaps.approval"] = table_,
  ["keymaps.approval.allow_once"] = H.key_list,
  ["keymaps.approval.allow_session"] = H.key_list,
  ["keymaps.approval.allow_project"] = H.key_list,
  ["keymaps.approval.allow_all"] = H.key_list,
  ["keymaps.approval.edit"] = H.key_list,
  ["keymaps.approval.refuse"] = H.key_list,
  ["keymaps.approval.refuse_with_reason"] = H.key_list,
  ["keymaps.approval.hide"] = key,
  ["keymaps.approve"] = function(v)
    return (type(v) == "string" and v ~= "") or v == false or "string or false"
  end,
  approval = table_,
  ["approval.delay"] = H.milliseconds,
  ["approval.typing"] = H.milliseconds,
  ["keymaps.approval.select"] = key,
  ["keymaps.approval.next_hunk"] = key,
  ["keymaps.approval.prev_hunk"] = key,
  ["keymaps.approval.drop_hunk"] = key,
  ["keymaps.approval.scroll_down"] = key,
  ["keymaps.approval.scroll_up"] = key,
  ["keymaps.paste_image"] = function(v)
    return (type(v) == "string" and v ~= "") or v == false or "string or false"
  end,
  images = table_,
  ["images.clipboard"] = function(v)
    local ok = v == nil
      or (
        type(v) == "table"
        and #v >= 1
        and vim.iter(v):all(function(a)
          return type(a) == "string" and a ~= ""
        end)
      )
    return ok or 'a command as a list of strings ({ "wl-paste", "--type", "image/png" }) or nil'
  end,
  ["keymaps.edit"] = function(v)
    return (type(v) == "string" and v ~= "") or v == false or "string or false"
  end,
  ["keymaps.inline"] = table_,
  ["keymaps.inline.keep"] = H.key_or_false,
  ["keymaps.inline.drop"] = H.key_or_false,
  ["keymaps.inline.keep_all"] = H.key_or_false,
  ["keymaps.inline.drop_all"] = H.key_or_false,
  ["keymaps.inline.next"] = H.key_or_false,
  ["keymaps.inline.prev"] = H.key_or_false,
  ["keymaps.inline.help"] = H.key_or_false,
  ["keymaps.inline.stop"] = H.key_or_false,
  inline = table_,
  ["inline.context_lines"] = function(v)
    return (type(v) == "number" and v >= 0 and math.floor(v) == v) or "a whole number of lines (0 or more)"
  end,
  ["inline.provider"] = function(v)
    return v == nil or v == "anthropic" or v == "openai" or v == "ollama" or '"anthropic", "openai", "ollama" or nil'
  end,
  ["inline.model"] = optional_string,
  ["keymaps.chat.undo"] = H.key_or_false,
  ["keymaps.chat.fork"] = H.key_or_false,
  ["keymaps.chat.edit"] = H.key_or_false,
  ["keymaps.chat.regenerate"] = H.key_or_false,
  ["keymaps.chat.branch_prev"] = H.key_or_false,
  ["keymaps.chat.branch_next"] = H.key_or_false,
  ["keymaps.btw"] = table_,
  ["keymaps.btw.to_input"] = H.key_or_false,
  ["keymaps.diff"] = table_,
  ["keymaps.diff.revert"] = H.key_or_false,
  ["keymaps.chat"] = table_,
  ["keymaps.chat.output"] = function(v)
    return (type(v) == "string" and v ~= "") or v == false or "string or false"
  end,
  window = table_,
  ["window.side"] = function(v)
    return v == "right" or v == "left" or '"right" or "left"'
  end,
  ["window.width"] = function(v)
    if type(v) == "number" and ((v > 0 and v < 1) or (v >= 1 and math.floor(v) == v)) then
      return true
    end
    return "a number of columns (integer >= 1) or a fraction between 0 and 1"
  end,
  input = table_,
  ["input.completion"] = function(v)
    return v == true or v == false or v == "auto" or 'true, false or "auto"'
  end,
  mcp_servers = function(v)
    return H.mcp_servers_problem(v) == nil or H.mcp_servers_problem(v)
  end,
  editor_tools = boolean,
  acp = table_,
  ["acp.agents"] = table_,
  permissions = table_,
  ["permissions.allow"] = H.rule_list,
  ["permissions.ask"] = H.rule_list,
  ["permissions.deny"] = H.rule_list,
  ["acp.connect_timeout"] = positive_number,
  sandbox = table_,
  ["sandbox.mode"] = function(v)
    return v == "workspace-write" or v == "read-only" or v == "off" or '"workspace-write", "read-only" or "off"'
  end,
  ["sandbox.network"] = boolean,
  ["sandbox.writable"] = H.path_list,
  auto_allow_sandboxed = boolean,
  instructions = H.instructions,
  models = H.models,
  thinking = H.thinking,
  reasoning = H.reasoning,
  compact_at = function(v)
    return v == false
      or (type(v) == "number" and v > 0 and v <= 1)
      or "a share of the window above 0 and at most 1 (0.8), or false"
  end,
  keep_turns = positive_integer,
  openai = table_,
  ["openai.api"] = function(v)
    return v == nil or v == "chat" or v == "responses" or '"chat", "responses" or nil'
  end,
  ask = table_,
  ["ask.context_lines"] = function(v)
    return (type(v) == "number" and v >= 0 and math.floor(v) == v) or "a whole number of lines (0 or more)"
  end,
  render = boolean,
}

--- What the sandbox becomes while any of its options is wrong: the strictest one, so a typo
--- never lets a command write or connect where the person meant to stop it.
H.strictest_sandbox = { mode = "read-only", network = false, writable = {} }

--- The merged options in use (the defaults until setup() is called).
---@type agent.Config
M.options = vim.deepcopy(H.defaults)

--- True once setup() has run (reported by :checkhealth agent).
M.did_setup = false

--- Dotted paths of keys setup() did not know, for :checkhealth agent.
---@type string[]
M.unknown = {}

--- Sets the value at dotted `path` in `tbl` (the parents exist: validation checked them).
function H.set(tbl, path, value)
  local keys = vim.split(path, ".", { plain = true })
  local parent = tbl
  for i = 1, #keys - 1 do
    parent = parent[keys[i]]
    if type(parent) ~= "table" then
      return
    end
  end
  parent[keys[#keys]] = value
end

--- Shows `problems` (sorted) and then `what_now`, as one error; nothing when there are none.
function H.report(problems, what_now)
  if #problems > 0 then
    table.sort(problems)
    vim.notify(table.concat(problems, "\n") .. "\n" .. what_now, vim.log.levels.ERROR)
  end
end

--- Merges `opts` over the defaults and validates the result. Each invalid field is reported (one
--- message naming them all) and falls back to its default, so a typo never leaves the plugin
--- unusable or stops the rest of the user's config from loading.
---@param opts? table
---@return agent.Config
function M.setup(opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("agent: setup() takes a table of options, got " .. type(opts), 0)
  end
  local merged = vim.tbl_deep_extend("force", vim.deepcopy(H.defaults), opts)
  -- A list the user gives replaces the default list (tbl_deep_extend would merge them by index).
  for path, check in pairs(H.schema) do
    if
      path == "api_key_cmd"
      or check == H.key_list
      or check == H.name_list
      or check == H.rule_list
      or check == H.path_list
      or check == H.string_list
      or check == H.models
      or check == H.instructions
    then
      local given = H.get(opts, path)
      if given ~= nil then
        H.set(merged, path, given)
      end
    end
  end
  local problems, rules_problems, sandbox_problems = {}, {}, {}
  for path, check in pairs(H.schema) do
    local value = H.get(merged, path)
    local parent_ok = not path:find("%.") or type(H.get(merged, path:match("^(.*)%."))) == "table"
    if parent_ok then
      local ok = check(value)
      local rule_problem
      if check == H.rule_list then
        rule_problem = ok ~= true and ("agent: `%s` should be %s, got %s"):format(path, ok, H.show(value))
          or H.rule_problem(path, value)
      end
      if rule_problem then
        -- Kept as written, not replaced by the default: the backend then starts nothing, where
        -- dropping a deny list over one typo would run what it was meant to stop.
        rules_problems[#rules_problems + 1] = rule_problem
      elseif ok ~= true and (path == "sandbox" or path:find("^sandbox%.")) then
        sandbox_problems[#sandbox_problems + 1] = ("agent: `%s` should be %s, got %s"):format(path, ok, H.show(value))
      elseif ok ~= true then
        problems[#problems + 1] = ("agent: `%s` should be %s, got %s"):format(path, ok, H.show(value, path))
        H.set(merged, path, vim.deepcopy(H.get(H.defaults, path)))
      end
    end
  end
  H.report(rules_problems, "agent: nothing runs until the rules are fixed (see :help agent-permissions)")
  if #sandbox_problems > 0 then
    merged.sandbox = vim.deepcopy(H.strictest_sandbox)
  end
  H.report(
    sandbox_problems,
    "agent: until this is fixed, commands run in the strictest sandbox (read-only, no network; see :help agent-sandbox)"
  )
  local unknown = {}
  if type(merged.acp) == "table" and type(merged.acp.agents) == "table" then
    H.check_agents(merged.acp.agents, problems, unknown)
  end
  H.report(
    problems,
    "agent: using the defaults for these; fix them in require('agent').setup() (see :help agent-config)"
  )

  H.find_unknown(opts, "", unknown)
  table.sort(unknown)
  M.unknown = unknown
  if #M.unknown > 0 then
    local list = table.concat(
      vim.tbl_map(function(p)
        return "`" .. p .. "`"
      end, M.unknown),
      ", "
    )
    vim.notify(
      ("agent: unknown option%s %s ignored; see :help agent-config for the known ones"):format(
        #M.unknown > 1 and "s" or "",
        list
      ),
      vim.log.levels.WARN
    )
  end
  M.options = merged
  M.did_setup = true
  return merged
end

--- The defaults (a copy), for documentation and tests.
---@return agent.Config
function M.defaults()
  return vim.deepcopy(H.defaults)
end

--- The window width in columns for the configured `window.width`.
---@return integer
function M.window_width()
  local width = M.options.window.width
  if width < 1 then
    width = math.floor(vim.o.columns * width)
  end
  -- Leave the editing windows at least 40 columns.
  return math.max(20, math.min(width, vim.o.columns - 40))
end

function H.get(tbl, path)
  local value = tbl
  for part in path:gmatch("[^.]+") do
    if type(value) ~= "table" then
      return nil
    end
    value = value[part]
  end
  return value
end

function H.show(value, path)
  if path == "api_key" then
    return type(value) -- never the value: it may be a key
  end
  if type(value) == "string" then
    return ("%q"):format(value)
  end
  return type(value) == "table" and "table" or tostring(value)
end

-- acp.agents.<name> = { cmd = { "prog", "arg" }, env = { NAME = "value" }, sandbox = true }
function H.check_agents(agents, problems, unknown)
  for name, agent in pairs(agents) do
    local path = "acp.agents." .. tostring(name)
    if type(name) ~= "string" then
      problems[#problems + 1] = ("agent: `%s` should be named by a string key"):format(path)
    elseif type(agent) ~= "table" then
      problems[#problems + 1] = ("agent: `%s` should be a table { cmd = {...}, env = {...}, sandbox = true }, got %s"):format(
        path,
        H.show(agent)
      )
    else
      -- No cmd: the preset of that name (`claude = { sandbox = true }`).
      local cmd = agent.cmd
      local cmd_ok = cmd == nil or (type(cmd) == "table" and #cmd > 0 and vim.islist(cmd))
      for _, word in ipairs(type(cmd) == "table" and cmd or {}) do
        cmd_ok = cmd_ok and type(word) == "string"
      end
      if not cmd_ok then
        problems[#problems + 1] = ("agent: `%s.cmd` should be a non-empty list of strings, got %s"):format(
          path,
          H.show(cmd)
        )
      end
      local env_ok = agent.env == nil or type(agent.env) == "table"
      for key, value in pairs(type(agent.env) == "table" and agent.env or {}) do
        env_ok = env_ok and type(key) == "string" and type(value) == "string"
      end
      if not env_ok then
        problems[#problems + 1] = ("agent: `%s.env` should be a table of strings by name, got %s"):format(
          path,
          H.show(agent.env)
        )
      end
      if agent.sandbox ~= nil and type(agent.sandbox) ~= "boolean" then
        problems[#problems + 1] = ("agent: `%s.sandbox` should be boolean, got %s"):format(path, H.show(agent.sandbox))
      end
      -- directories = { "~/notes", { path = "../lib", writable = true } }
      local dirs_ok = agent.directories == nil or (type(agent.directories) == "table" and vim.islist(agent.directories))
      for _, dir in ipairs(type(agent.directories) == "table" and agent.directories or {}) do
        local entry_ok = type(dir) == "string"
          or type(dir) == "table"
            and type(dir.path) == "string"
            and (dir.writable == nil or type(dir.writable) == "boolean")
        dirs_ok = dirs_ok and entry_ok
      end
      if not dirs_ok then
        problems[#problems + 1] = ("agent: `%s.directories` should be a list of paths or { path = ..., writable = true }, got %s"):format(
          path,
          H.show(agent.directories)
        )
      end
      local mcp_problem = H.mcp_servers_problem(agent.mcp_servers)
      if mcp_problem then
        problems[#problems + 1] = ("agent: `%s.mcp_servers` should be %s, got %s"):format(
          path,
          mcp_problem,
          H.show(agent.mcp_servers)
        )
      end
      if agent.worktree ~= nil and type(agent.worktree) ~= "boolean" then
        problems[#problems + 1] = ("agent: `%s.worktree` should be boolean, got %s"):format(
          path,
          H.show(agent.worktree)
        )
      end
      for key in pairs(agent) do
        local known =
          { cmd = true, env = true, sandbox = true, directories = true, worktree = true, mcp_servers = true }
        if not known[key] then
          unknown[#unknown + 1] = path .. "." .. tostring(key)
        end
      end
    end
  end
end

--- What is wrong with an `mcp_servers` table (nil when nothing): each entry, by name, is a stdio
--- server `{ command, args?, env? }` or a remote one `{ url, headers?, type? }`.
---@param servers any
---@return string?
function H.mcp_servers_problem(servers)
  local expected = "a table of servers by name, each { command = ..., args = {...}, env = {...} } "
    .. 'or { url = ..., headers = {...}, type = "http"|"sse" }'
  if servers == nil then
    return nil
  end
  if type(servers) ~= "table" then
    return expected
  end
  local function strings(map)
    if map == nil then
      return true
    end
    if type(map) ~= "table" then
      return false
    end
    for k, v in pairs(map) do
      if type(k) ~= "string" or type(v) ~= "string" then
        return false
      end
    end
    return true
  end
  local known = { command = true, args = true, env = true, url = true, headers = true, type = true }
  for name, server in pairs(servers) do
    if type(name) ~= "string" or name == "" or type(server) ~= "table" then
      return expected
    end
    for key in pairs(server) do
      if not known[key] then
        return expected
      end
    end
    local stdio = type(server.command) == "string" and server.command ~= "" and server.url == nil
    local remote = type(server.url) == "string" and server.url ~= "" and server.command == nil
    local args_ok = server.args == nil
      or (
        type(server.args) == "table"
        and vim.iter(server.args):all(function(a)
          return type(a) == "string"
        end)
      )
    local ok = (stdio and args_ok and strings(server.env) and server.headers == nil and server.type == nil)
      or (
        remote
        and server.args == nil
        and server.env == nil
        and strings(server.headers)
        and (server.type == nil or server.type == "http" or server.type == "sse")
      )
    if not ok then
      return expected
    end
  end
  return nil
end

--- The MCP servers an external agent is handed: setup's `mcp_servers`, and the agent's own
--- (`acp.agents.NAME.mcp_servers`) over them by name; as a list sorted by name.
---@param agent string
---@return ({ name: string } | agent.McpServer)[]
function M.mcp_servers_for(agent)
  local options = M.options
  local merged = vim.deepcopy(options.mcp_servers or {})
  local own = ((options.acp or {}).agents or {})[agent]
  for name, server in pairs(type(own) == "table" and own.mcp_servers or {}) do
    merged[name] = vim.deepcopy(server)
  end
  local list = {}
  for name, server in pairs(merged) do
    server.name = name
    list[#list + 1] = server
  end
  table.sort(list, function(a, b)
    return a.name < b.name
  end)
  return list
end

-- Walks the user's table; any path the schema does not know is unknown. Below `acp.agents`
-- the names are the user's own (checked by H.check_agents).
function H.find_unknown(tbl, prefix, out)
  for key, value in pairs(tbl) do
    local path = prefix .. tostring(key)
    if H.schema[path] == nil then
      out[#out + 1] = path
    elseif type(value) == "table" and H.schema[path] == table_ and path ~= "acp.agents" then
      H.find_unknown(value, path .. ".", out)
    end
  end
end

return M
