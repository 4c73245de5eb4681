--- agent.nvim: a coding agent in a Neovim split, run by the Rust backend `agent-nvim`.
---
--- Public API: setup(), ask(), open(), status(), stop(), new(), sessions(), resume(),
--- rewind_points(), rewind(), diff(), conversations(), show(), close(), name(). See :help agent.
---
--- Several conversations live at once, one per tab page (lua/agent/conversations.lua): what a
--- function does, it does to the current tab page's conversation (ask() and open() start one
--- there when it has none), or, run from a chat's keys, to that chat's.

local M = {}
local H = {}

--- Configures the plugin (optional: without it the defaults of :help agent-config apply).
--- Order: config, autocommands, highlights, keymaps. Raises on an invalid option, naming it.
---@param opts? agent.Config|table
function M.setup(opts)
  local config = require("agent.config")
  config.setup(opts)
  H.create_autocommands()
  H.define_highlights()
  H.apply_keymaps(config.options.keymaps)
end

--- Sends `prompt` to the agent, opening the conversation (without moving the cursor there).
--- Without a prompt, asks for a question with vim.ui.input about the current line, or about the
--- selection in Visual mode, and sends the question with that context.
--- `opts.context`: text sent after the prompt as it is, never read for `@` and `#` (the lines
--- the ask mapping adds). `opts.branch`: sent as a new branch from before that prompt of the
--- conversation (:help agent-branches), the branch there kept; refused while a turn runs.
---@param prompt? string
---@param opts? { context?: string, branch?: integer }
---@return boolean sent false when nothing was sent (the reason was shown); true when it was
--- sent or queued behind the running turn
function M.ask(prompt, opts)
  return H.here(H.ask, prompt, opts)
end

function H.ask(prompt, opts)
  if prompt == nil then
    local mode = vim.fn.mode()
    local context
    if mode == "v" or mode == "V" or mode == "\22" then
      local first, last = vim.fn.line("v"), vim.fn.line(".")
      vim.cmd("normal! \27")
      context = require("agent.context.ask").selection(math.min(first, last), math.max(first, last))
    else
      context = require("agent.context.ask").cursor()
    end
    require("agent.context.ask").interactive(M, context)
    return false
  end
  if vim.trim(prompt) == "" then
    return false
  end
  H.ensure_init()
  local chat = require("agent.chat")
  local queue = chat.queue
  local branch = opts and opts.branch
  if branch and chat.busy() then
    vim.notify("agent: a turn is running; send the new branch once it has ended", vim.log.levels.WARN)
    return false
  end
  -- Behind the running turn, and behind prompts queued before it: sent in order, each when the
  -- backend is idle again (M.queue lists and removes them; :Agent stop may drop them).
  if not branch and (chat.busy() or (#queue.items > 0 and not H.from_queue)) then
    queue.push(require("agent.clipboard").pin(prompt), opts and opts.context)
    if not chat.visible() then
      vim.notify(("agent: queued: %s"):format(queue.label(prompt)), vim.log.levels.INFO)
    end
    return true
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return false
  end
  -- `@path` and `#buffer`... attached (see :help agent-context); an external agent's own
  -- command goes as typed.
  local expanded = require("agent.slash").for_agent(prompt) and { text = prompt, attachments = {}, images = {} }
    or require("agent.context").expand(prompt)
  local context = opts and opts.context
  local shown = context and (prompt .. "\n\n" .. context) or prompt
  -- Shown where it was asked; a queued prompt of a conversation shown in another tab page (or
  -- none) goes without pulling its chat into this one.
  local conversations = require("agent.conversations")
  if conversations.in_tab() == conversations.active() then
    chat.open({ focus = false })
  end
  local text = context and (expanded.text .. "\n\n" .. context) or expanded.text
  if branch then
    -- The backend draws the chat again as the new branch, this prompt last.
    chat.branching(prompt)
    rpc.prompt(text, expanded.images, { turn = branch })
    return true
  end
  chat.user_prompt(shown, expanded.attachments, prompt)
  rpc.prompt(text, expanded.images)
  conversations.name_from(conversations.active(), prompt)
  return true
end

-- `e` on a prompt row: its text (as typed, without its attachments) in the input, to send as a
-- new branch from before it.
function H.edit_prompt(row)
  local chat = require("agent.chat")
  if chat.busy() then
    vim.notify("agent: a turn is running; edit a prompt once it has ended", vim.log.levels.WARN)
    return
  end
  local turn = chat.prompt_at(row)
  if not turn then
    local key = require("agent.config").options.keymaps.chat.edit
    vim.notify(
      ("agent: `%s` puts a prompt's text in the input: put the cursor on it (## You)"):format(key),
      vim.log.levels.INFO
    )
    return
  end
  local text, err = require("agent.rpc").prompt_text(turn)
  if not text then
    vim.notify(err or "agent: that prompt could not be read", vim.log.levels.WARN)
    return
  end
  local typed = require("agent.context.format").parse(text)
  chat.edit_in_input(typed, turn)
end

--- Asks again for the answer to prompt `turn` (the last one by default), as a new branch
--- (:help agent-branches): the answer there is kept, to switch back to with `[`.
---@param turn? integer
---@return boolean sent
function M.regenerate(turn)
  return H.here(function()
    H.ensure_init()
    local chat = require("agent.chat")
    local rpc = require("agent.rpc")
    turn = turn or chat.prompt_count()
    if turn < 1 then
      vim.notify("agent: there is no answer to ask for again", vim.log.levels.INFO)
      return false
    end
    if chat.busy() then
      vim.notify("agent: a turn is running; ask again once it has ended", vim.log.levels.WARN)
      return false
    end
    if not rpc.ensure() then
      return false
    end
    chat.branching()
    rpc.prompt("", nil, { turn = turn, again = true })
    return true
  end) or false
end

--- Switches, at prompt `turn`, to the branch `step` places after the current one (before it
--- when negative): the chat and what the model is sent become that branch's; the files stay
--- as they are (:help agent-branches).
---@param turn integer
---@param step integer
function M.switch_branch(turn, step)
  H.here(function()
    if require("agent.chat").busy() then
      vim.notify("agent: a turn is running; switch branches once it has ended", vim.log.levels.WARN)
      return
    end
    require("agent.rpc").branch(turn, step)
  end)
end

--- Edits some lines of the current buffer in place (:help agent-inline): the model's change is
--- proposed in the buffer, hunk by hunk, to keep or drop. `opts.first`/`opts.last` (1-based
--- lines) give the range; else the Visual selection; else the treesitter node around the cursor
--- (a function, a class...), else the cursor's line. Without `opts.instruction`, asks for one.
---@param opts? { instruction?: string, first?: integer, last?: integer }
---@return boolean started false when nothing was sent (the reason was shown, or it was asked for)
function M.edit(opts)
  return H.here(function()
    local rpc = require("agent.rpc")
    return require("agent.inline").edit(opts, {
      ensure = rpc.ensure,
      buffer_path = require("agent.context.ask").buffer_path,
      spent = H.this_acting(function(cost)
        require("agent.chat").spent(cost)
      end),
    })
  end) or false
end

--- Asks `question` apart from the conversation (:help agent-btw): the model answers with the
--- conversation's context in a float; neither joins the conversation, and no tool runs.
--- Without a question, asks for one.
---@param question? string
---@return boolean asked false when nothing was sent (the reason was shown, or it was asked for)
function M.btw(question)
  return H.here(function()
    return require("agent.side").ask(question, {
      ensure = require("agent.rpc").ensure,
      to_input = H.this_acting(function(text)
        local chat = require("agent.chat")
        chat.open({ focus = true, insert = false })
        chat.queue.back_to_input({ text }, "agent: the answer is in the input")
      end),
      spent = H.this_acting(function(cost)
        require("agent.chat").spent(cost)
      end),
    })
  end) or false
end

--- Opens the conversation split (chat above, input below), or focuses its input if it is open,
--- in Insert mode, ready to type. Starts the backend if it is not running, so its errors show at
--- once.
---@param opts? { focus?: boolean } focus: move the cursor to the input window (default true)
function M.open(opts)
  H.here(function()
    opts = opts or {}
    local focus = opts.focus ~= false
    require("agent.chat").open({ focus = focus, insert = focus })
    require("agent.rpc").ensure()
  end)
end

--- Cancels the running turn (the running command's process tree is killed). When prompts are
--- queued behind it, then asks whether to drop them or send them (nothing is sent from the
--- queue until the answer); `opts.queue` ("drop" or "keep") answers that without asking.
---@param opts? { queue?: "drop"|"keep" }
function M.stop(opts)
  H.this(H.stop, opts)
end

function H.stop(opts)
  opts = opts or {}
  -- An inline edit of the buffer the person is in stops first; when the chat is idle, every
  -- inline edit of this conversation (a running turn is stopped alone otherwise: the backend's
  -- `cancel` leaves inline edits be).
  local chat_busy = require("agent.rpc").running() and require("agent.chat").busy()
  if package.loaded["agent.inline"] then
    local inline = require("agent.inline")
    if inline.stop(nil, not chat_busy and require("agent.conversations").active().id or nil) then
      vim.notify("agent: the edit was stopped", vim.log.levels.INFO)
      return
    end
  end
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  local running = rpc.running() and chat.busy()
  local queued = #chat.queue.items
  if not running then
    vim.notify("agent: nothing is running", vim.log.levels.INFO)
    return
  end
  if queued == 0 then
    rpc.cancel()
    return
  end
  -- The turn stops now; the queue waits for the answer (an asynchronous vim.ui.select may
  -- answer after the turn has ended: nothing is sent from the queue meanwhile).
  local queue = chat.queue
  queue.held = true
  rpc.cancel()
  local function answered(answer)
    queue.held = false
    if answer == "drop" then
      local dropped = #queue.clear()
      vim.notify(("agent: stopped; dropped %d queued prompt%s"):format(dropped, dropped == 1 and "" or "s"))
    else
      H.send_queued()
    end
  end
  if opts.queue then
    answered(opts.queue)
    return
  end
  require("agent.pickers").stop_queue(queued, answered)
end

--- The prompts queued behind the running turn, oldest first (a copy). `queue(i)` removes the
--- i-th; `:Agent queue` lists them to remove one.
---@param remove? integer
---@return string[]
function M.queue(remove)
  local queue = require("agent.chat").queue
  if type(remove) == "number" then
    queue.remove(remove)
  end
  return vim.deepcopy(queue.items)
end

--- Starts a fresh conversation. In a tab page that shows one, in a new tab page beside it (the
--- one shown goes on); `opts.here` (`:Agent new here`) starts over in this tab page instead:
--- cancels the running turn, forgets the history and the session's approvals, and clears the
--- chat. Prompts still queued go back into the input, not lost. `opts.worktree` (`:Agent new
--- --worktree [BRANCH]`): the new conversation works in a git worktree of its own, on a new
--- branch (the name given, or `agent/<date>-<time>`); see :help agent-worktrees.
---@param opts? { here?: boolean, worktree?: boolean|string }
function M.new(opts)
  local conversations = require("agent.conversations")
  local worktree = opts and opts.worktree
  if worktree or (not (opts and opts.here) and conversations.in_tab()) then
    H.new_in_tab(worktree)
    return
  end
  H.here(function()
    local rpc = require("agent.rpc")
    local chat = require("agent.chat")
    local queued = chat.queue.clear()
    if rpc.running() then
      rpc.new()
    end
    chat.clear(rpc.running(), true)
    chat.queue.back_to_input(queued)
    local conversation = conversations.active()
    if not conversation.named then
      conversation.name = nil
    end
  end)
end

--- A new conversation shown in this tab page (a new one when this one shows one), opened; with
--- `worktree`, in a git worktree of its own (a branch name, or true). Nil after saying why
--- when no more may be made.
function H.new_in_tab(worktree)
  local conversations = require("agent.conversations")
  H.ensure_init()
  local conversation, err = conversations.make()
  if not conversation then
    vim.notify(err, vim.log.levels.ERROR)
    return nil
  end
  if worktree then
    conversation.worktree = { branch = type(worktree) == "string" and worktree or nil }
  end
  if conversations.in_tab() then
    vim.cmd.tabnew()
  end
  -- The empty buffer a new tab page starts with goes when the chat is there.
  local scratch = vim.api.nvim_get_current_buf()
  conversations.place(conversation, vim.api.nvim_get_current_tabpage())
  M.open()
  if vim.api.nvim_buf_is_valid(scratch) and vim.api.nvim_buf_get_name(scratch) == "" then
    vim.bo[scratch].bufhidden = "wipe"
  end
  return conversation
end

---@class agent.ConversationRow
---@field id integer
---@field name string its name (from its first prompt, or :Agent name), or `conversation N`
---@field agent string "built-in", or the external agent's name
---@field state string what its chat's winbar says: "idle", "writing", "running `cargo test` 4s", "waiting for approval"...
---@field busy boolean a prompt is being worked on
---@field waiting boolean one of its questions waits for an answer
---@field age? string how long ago it was started (`4 min ago`, as the backend words ages; nil
--- before the backend runs)
---@field since string when it was started (`14:05`; with the date when not today)
---@field cost? number what it has cost in dollars; nil when a price is unknown
---@field shown boolean its tab page shows it
---@field current boolean it is the current tab page's

--- Every live conversation, in the order they were started (see :help agent-conversations).
---@return agent.ConversationRow[]
function M.conversations()
  local conversations = require("agent.conversations")
  local here = conversations.in_tab()
  local today = os.date("%Y-%m-%d")
  local ages = require("agent.rpc").ages()
  return vim.tbl_map(function(conversation)
    local status = conversations.acting(conversation.id, function()
      return require("agent.chat").status()
    end)
    local tab = conversation.tab
    return {
      id = conversation.id,
      name = conversations.label(conversation),
      agent = conversation.agent,
      state = status.text,
      busy = conversations.acting(conversation.id, require("agent.chat").busy),
      waiting = status.state == "approval" or H.question_of(conversation.id),
      age = ages[conversation.id],
      since = os.date("%Y-%m-%d", conversation.created) == today and os.date("%H:%M", conversation.created)
        or os.date("%Y-%m-%d %H:%M", conversation.created),
      cost = status.cost,
      shown = tab ~= nil and vim.api.nvim_tabpage_is_valid(tab),
      current = conversation == here,
    }
  end, conversations.all())
end

--- Goes to conversation `id`: to its tab page when one shows it, else shows it in the current
--- tab page (the conversation shown there goes on, unshown).
---@param id integer
function M.show(id)
  local conversations = require("agent.conversations")
  local conversation = conversations.get(id)
  if not conversation then
    vim.notify(
      ("agent: no conversation %s is open (:Agent list shows them)"):format(tostring(id)),
      vim.log.levels.ERROR
    )
    return
  end
  if conversation.tab and vim.api.nvim_tabpage_is_valid(conversation.tab) then
    vim.api.nvim_set_current_tabpage(conversation.tab)
    conversations.used(conversation)
    return
  end
  conversations.place(conversation, vim.api.nvim_get_current_tabpage())
  M.open()
end

--- Ends conversation `id` (default: the current tab page's): its turn is stopped, an external
--- agent it drives ends, its chat goes. Its saved file stays, to resume.
---@param id? integer
function M.close(id)
  local conversations = require("agent.conversations")
  local conversation = id and conversations.get(id) or conversations.in_tab()
  if not conversation then
    vim.notify("agent: no conversation to close here (:Agent list shows them)", vim.log.levels.INFO)
    return
  end
  if package.loaded["agent.approval"] then
    require("agent.approval").dismiss(conversation.id)
  end
  if package.loaded["agent.elicit"] then
    require("agent.elicit").dismiss(conversation.id)
  end
  conversations.acting(conversation.id, function()
    local chat = require("agent.chat")
    chat.queue.back_to_input(chat.queue.clear())
  end)
  require("agent.rpc").close(conversation.id)
  local tab = conversation.tab
  conversations.forget(conversation.id)
  -- Its tab page goes too when nothing else is left in it.
  if tab and vim.api.nvim_tabpage_is_valid(tab) and #vim.api.nvim_list_tabpages() > 1 then
    local others = vim.tbl_filter(function(win)
      local buf = vim.api.nvim_win_get_buf(win)
      return vim.api.nvim_buf_get_name(buf) ~= "" or vim.bo[buf].modified
    end, vim.api.nvim_tabpage_list_wins(tab))
    if #others == 0 then
      pcall(vim.cmd.tabclose, vim.api.nvim_tabpage_get_number(tab))
    end
  end
end

--- Names the current tab page's conversation (`:Agent name NEW`): its winbar, the picker's
--- title, notices and :Agent list say it.
---@param name string
function M.name(name)
  local conversations = require("agent.conversations")
  local conversation = conversations.in_tab()
  if not conversation then
    vim.notify("agent: no conversation here to name; start one with :Agent", vim.log.levels.INFO)
    return
  end
  if not name or vim.trim(name) == "" then
    vim.notify("agent: :Agent name needs a name (:Agent name fix the tests)", vim.log.levels.ERROR)
    return
  end
  conversations.rename(conversation, name)
  -- Its saved file is listed by that name too (:Agent resume).
  local rpc = require("agent.rpc")
  if rpc.running() and conversation.info then
    conversations.acting(conversation.id, rpc.renamed, vim.trim(name))
  end
end

--- Forks the conversation (:help agent-fork): a new conversation, in a tab page of its own,
--- holding this one's history before prompt `opts.turn` (all of it without one), named
--- `fork of NAME`. This one goes on unchanged, and no file is touched; with `opts.code`, the
--- fork works in a git worktree of its own holding the files as they were then.
---@param opts? { turn?: integer, code?: boolean }
---@return boolean forked
function M.fork(opts)
  opts = opts or {}
  local source = H.this(function()
    local conversations = require("agent.conversations")
    local rpc = require("agent.rpc")
    if not rpc.running() then
      vim.notify("agent: no conversation to fork yet; send a prompt first", vim.log.levels.INFO)
      return nil
    end
    local title = "fork of " .. conversations.label(conversations.active())
    local forked, err = rpc.fork(opts.turn, title, opts.code)
    if not forked then
      vim.notify(err or "agent: the backend did not answer", vim.log.levels.ERROR)
      return nil
    end
    return {
      id = forked.id,
      checkpoint = forked.checkpoint,
      title = title,
      from = conversations.active().id,
      agent = forked.agent,
      session = forked.session,
    }
  end)
  if not source then
    return false
  end
  -- A conversation of its own (a new tab page when this one has one; with its files, in a
  -- worktree of its own), resumed from the fork.
  local fork = H.new_in_tab(source.checkpoint ~= nil)
  if not fork then
    return false -- no more conversations may be made (said); the one forked from is as it was
  end
  local conversations = require("agent.conversations")
  conversations.rename(fork, source.title)
  if source.checkpoint then
    local ok = conversations.acting(fork.id, function()
      local rpc = require("agent.rpc")
      if not rpc.ensure() then
        return false
      end
      local done, err = rpc.adopt(source.from, source.checkpoint, source.id)
      if not done then
        vim.notify(err or "agent: the fork's files were not restored", vim.log.levels.ERROR)
        return false
      end
      return true
    end)
    if not ok then
      -- Nothing of the fork is kept: its worktree (made for it, holding nothing of yours),
      -- its saved file and its conversation go.
      conversations.acting(fork.id, function()
        local _, err = require("agent.rpc").worktree({ action = "remove", force = true })
        if err then
          vim.notify(("agent: the fork's worktree stays: %s"):format(err), vim.log.levels.WARN)
        end
      end)
      conversations.acting(source.from, function()
        require("agent.rpc").session_delete(source.id)
      end)
      M.close(fork.id)
      return false
    end
  end
  conversations.acting(fork.id, function()
    if source.agent then
      -- The agent forked its session: the fork's conversation starts the same agent and loads
      -- the new session.
      local configured = (require("agent.config").options.acp.agents or {})[source.agent] or {}
      require("agent.rpc").acp(
        source.agent,
        configured.cmd,
        configured.env,
        configured.sandbox,
        configured.directories,
        source.session
      )
    else
      M.resume(source.id)
    end
  end)
  -- One line that fits: a longer message would stop the screen at a hit-enter prompt.
  local said = ("agent: forked (%s); the original is unchanged"):format(source.title)
  local room = math.max(20, vim.v.echospace - 1)
  if vim.fn.strdisplaywidth(said) > room then
    said = vim.fn.strcharpart(said, 0, room - 1) .. "…"
  end
  vim.notify(said)
  return true
end

--- Writes the conversation as markdown (:help agent-export): prompts, answers, each tool call
--- with its result folded in `<details>`, never a key. To `file` (refusing to write over one
--- that exists), else into a new buffer in a tab page of its own.
---@param file? string
---@return boolean exported
function M.export(file)
  return H.this(function()
    local rpc = require("agent.rpc")
    if not rpc.running() then
      vim.notify("agent: no conversation to export yet; send a prompt first", vim.log.levels.INFO)
      return false
    end
    local answer, err = rpc.export()
    if not answer then
      vim.notify(err or "agent: the backend did not answer", vim.log.levels.ERROR)
      return false
    end
    local lines = vim.split(answer.markdown, "\n", { plain = true })
    if lines[#lines] == "" then
      lines[#lines] = nil
    end
    if file and vim.trim(file) ~= "" then
      local path = vim.fn.fnamemodify(vim.fn.expand(vim.trim(file)), ":p")
      -- A new file only (a link, even one pointing nowhere, is not written through), readable
      -- by its owner alone, as the saved conversation is.
      local fd, open_err = vim.uv.fs_open(path, "wx", tonumber("600", 8))
      if not fd then
        local exists = tostring(open_err):find("EEXIST")
        vim.notify(
          exists and ("agent: %s exists; export to another name (nothing was written)"):format(file)
            or ("agent: could not write %s: %s"):format(path, open_err),
          vim.log.levels.ERROR
        )
        return false
      end
      local written = vim.uv.fs_write(fd, table.concat(lines, "\n") .. "\n")
      vim.uv.fs_close(fd)
      if not written then
        vim.notify(("agent: could not write %s"):format(path), vim.log.levels.ERROR)
        return false
      end
      vim.notify(("agent: exported the conversation to %s (%d lines)"):format(path, #lines), vim.log.levels.INFO)
      return true
    end
    vim.cmd("tabnew")
    local buf = vim.api.nvim_get_current_buf()
    vim.bo[buf].bufhidden = "wipe"
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.bo[buf].filetype = "markdown"
    vim.bo[buf].modified = false
    vim.notify(("agent: conversation %s as markdown; :w {file} keeps it"):format(answer.id), vim.log.levels.INFO)
    return true
  end) or false
end

--- Chooses one of the connected external agent's modes (:Agent mode [ID]); without an id,
--- picks one with vim.ui.select. Remembered for this agent's next session. See
--- :help agent-acp-choices.
---@param id? string
function M.mode(id)
  require("agent.choices").mode(id)
end

--- Chooses a value of one of the external agent's config options (:Agent option [ID [VALUE]]);
--- what is left out is picked with vim.ui.select. See :help agent-acp-choices.
---@param id? string
---@param value? string
function M.option(id, value)
  require("agent.choices").option(id, value)
end

--- Switches the model the following prompts use (the running turn finishes on its own) and
--- shows it in the status line. Without `name`, picks one with vim.ui.select from setup()'s
--- `models`, the provider's models in the built-in table and, for Ollama, the models its server
--- lists. See :help agent-model.
---@param name? string
function M.model(name)
  H.here(H.model, name)
end

function H.model(name)
  local choices = require("agent.choices")
  if choices.connected() then
    choices.model(name)
    return
  end
  H.ensure_init()
  if not name or vim.trim(name) == "" then
    require("agent.pickers").model(M)
    return
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local model, err = rpc.model(vim.trim(name))
  if not model then
    local said = tostring(err)
    vim.notify(said:match("agent: .*") or ("agent: cannot switch the model: " .. said), vim.log.levels.ERROR)
    return
  end
  require("agent.chat").model_switched(model)
  vim.notify(("agent: the next prompts use %s"):format(model), vim.log.levels.INFO)
end

--- The models :Agent model offers: setup()'s `models`, the model in use and those the backend
--- reported (the provider's default, the model table's entries for the provider, and the
--- models an Ollama server listed when :Agent model asked), each once.
---@return string[]
function M.models()
  local seen, names = {}, {}
  local function add(name)
    if type(name) == "string" and name ~= "" and not seen[name] then
      seen[name] = true
      names[#names + 1] = name
    end
  end
  local configured = require("agent.config").options.models or {}
  for _, name in ipairs(configured) do
    add(name)
  end
  -- Models given settings by name are offered too, in a stable order.
  local named = vim.tbl_filter(function(key)
    return type(key) == "string"
  end, vim.tbl_keys(configured))
  table.sort(named)
  for _, name in ipairs(named) do
    add(name)
  end
  local chat = package.loaded["agent.chat"] and require("agent.chat")
  for _, name in ipairs(chat and chat.models_seen() or {}) do
    add(name)
  end
  add(require("agent.config").options.model)
  return names
end

--- Sends the oldest queued prompt, once the backend has wholly ended the turn before it.
function H.send_queued()
  local chat = require("agent.chat")
  local queue = chat.queue
  if chat.busy() or queue.held or #queue.items == 0 then
    return
  end
  local prompt, context = queue.pop()
  H.from_queue = true
  local ok, sent = pcall(M.ask, prompt, { context = context })
  H.from_queue = false
  if not (ok and sent) then
    -- Not sent (no backend): back in the input, not lost.
    queue.back_to_input({ queue.whole(prompt, context) })
  end
  if not ok then
    error(sent, 0)
  end
end

--- This workspace's saved conversations, the most recent first (see :help agent-sessions).
--- Starts the backend if it is not running. Each is `{ id, title, updated, prompts, tokens,
--- problem? }`; one with a `problem` cannot be resumed. A running external agent's own sessions
--- are listed too, marked with its name: `{ id = "agent:{name}:{its id}", agent, session, title,
--- updated? }`. Nil (after saying why) when the backend cannot answer.
---@return agent.Session[]?
function M.sessions()
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return nil
  end
  local list, err = rpc.sessions()
  if not list then
    vim.notify(("agent: cannot list the saved conversations: %s"):format(err), vim.log.levels.ERROR)
    return nil
  end
  return list
end

--- Compacts the conversation now: its older part is replaced, in what the model is sent, by a
--- summary the model writes; the latest `keep_turns` prompts stay as they are. The chat shows
--- it as a folded row. See :help agent-compact.
function M.compact()
  H.here(H.compact)
end

function H.compact()
  H.ensure_init()
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  if not rpc.running() then
    vim.notify("agent: there is no conversation to compact yet", vim.log.levels.INFO)
    return
  end
  if chat.busy() then
    vim.notify("agent: the agent is working; :Agent compact once it is idle", vim.log.levels.WARN)
    return
  end
  M.open({ focus = false })
  chat.compacting()
  rpc.compact()
end

--- Lists the permission rules in force for this workspace with where each came from, in
--- vim.ui.select; choosing a saved one ("Allow always in this project") removes it. See
--- :help agent-permissions.
function M.permissions()
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local answer, err = rpc.permissions()
  if not answer then
    vim.notify(("agent: cannot list the permission rules: %s"):format(err), vim.log.levels.ERROR)
    return
  end
  if answer.problem then
    vim.notify(("agent: the saved rules are not used: %s"):format(answer.problem), vim.log.levels.WARN)
  end
  local rows = answer.rules or {}
  if #rows == 0 then
    vim.notify(
      "agent: no permission rules for this workspace; add some in setup({ permissions = ... }) or answer a request with Always allow (see :help agent-permissions)",
      vim.log.levels.INFO
    )
    return
  end
  require("agent.pickers").permissions(rows, rpc.permissions)
end

--- Continues saved conversation `id` with the built-in agent: the chat shows it as it looked, and
--- the next prompt goes on with its whole history. An `agent:{name}:{id}` from sessions() has the
--- running external agent load its own session instead. Without `id`, picks one with
--- vim.ui.select.
---@param id? string
function M.resume(id)
  H.here(H.resume, id)
end

function H.resume(id)
  if not id or id == "" then
    require("agent.pickers").session(M)
    return
  end
  H.ensure_init()
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  if not rpc.ensure() then
    return
  end
  if package.loaded["agent.approval"] then
    require("agent.approval").dismiss(require("agent.conversations").active().id)
  end
  if package.loaded["agent.elicit"] then
    require("agent.elicit").dismiss(require("agent.conversations").active().id)
  end
  local queued = chat.queue.clear()
  chat.clear(true)
  -- In the input, ready to type, as after :Agent: what is typed next goes to the agent (queued
  -- until the conversation is shown), never into the file that had focus.
  chat.open({ focus = true, insert = true })
  chat.queue.back_to_input(queued)
  chat.resuming()
  rpc.resume(id)
end

--- Lists what the agent changed in the quickfix list: the files changed since the start of the
--- last prompt (`opts.since = "all"`: since the conversation began; a prompt checkpoint's id, as
--- a chat `done` row passes: since that prompt began), each `A path +12 -0`. <CR> on an entry
--- opens its diff against the checkpoint (see :help agent-diff).
--- `opts.only`: those paths (workspace-relative) alone, as a row of an agent's changes made by
--- itself lists them.
---@param opts? { since?: string, only?: string[] }
---@return boolean listed false when nothing changed or nothing can be compared (the reason was shown)
function M.diff(opts)
  return H.this(H.diff, opts) or false
end

function H.diff(opts)
  H.ensure_init()
  if opts and opts.since == "base" then
    return H.diff_base()
  end
  return require("agent.review").diff(opts)
end

-- `u` on a row of an agent's changes made by itself: those files put back as the checkpoint
-- before its turn had them (once; :Agent rewind offers undoing the restore).
function H.undo_outside(row)
  if row.undone then
    vim.notify("agent: those files were put back already; :Agent rewind offers undoing that", vim.log.levels.INFO)
    return
  end
  local said, err = require("agent.rpc").undo_outside(row.checkpoint, row.outside)
  if not said then
    vim.notify(err or "agent: the backend did not answer", vim.log.levels.ERROR)
    return
  end
  row.undone = true
  vim.notify(tostring(said), vim.log.levels.INFO)
end

--- Brings what the current tab page's conversation changed in its worktree (since the commit it
--- started from) into the main working tree's files (`:Agent merge`). Refused, writing nothing,
--- when one of those files changed there too or has unsaved changes in Neovim: the message
--- names them. See :help agent-worktrees.
function M.merge()
  local answer = H.worktree_request({ action = "merge" }, "merge")
  if not answer then
    return
  end
  local files = answer.files or {}
  if #files == 0 then
    vim.notify(("agent: %s changed nothing to merge"):format(answer.branch), vim.log.levels.INFO)
    return
  end
  local paths = vim.tbl_map(function(file)
    return file.path
  end, files)
  vim.notify(
    ("agent: merged %d file%s from %s into the main working tree: %s"):format(
      #files,
      #files == 1 and "" or "s",
      answer.branch,
      table.concat(paths, ", ")
    ),
    vim.log.levels.INFO
  )
end

--- Deletes the current tab page's conversation's worktree (`:Agent worktree remove`; its branch
--- stays), asking first when it holds changes not merged, and closes the conversation.
function M.worktree_remove()
  local conversation = require("agent.conversations").in_tab()
  local answer = H.worktree_request({ action = "remove" }, "remove the worktree")
  if not (answer and conversation) then
    return
  end
  local function removed()
    M.close(conversation.id)
    vim.notify("agent: the worktree was removed (its branch stays)", vim.log.levels.INFO)
  end
  if answer.removed then
    removed()
    return
  end
  vim.ui.select({ "Remove it, and its changes with it", "Keep it" }, {
    prompt = ("agent: the worktree holds %d changed file%s not merged (:Agent merge brings them over)"):format(
      answer.unmerged,
      answer.unmerged == 1 and "" or "s"
    ),
    kind = "agent.worktree_remove",
  }, function(choice, index)
    if index == 1 then
      local forced = require("agent.conversations").acting(conversation.id, H.worktree_request, {
        action = "remove",
        force = true,
      }, "remove the worktree")
      if forced and forced.removed then
        removed()
      end
    end
  end)
end

-- What the current tab page's conversation's worktree says to `arg`, or nil after saying why.
function H.worktree_request(arg, doing)
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.running() then
    vim.notify("agent: no conversation is running here", vim.log.levels.INFO)
    return nil
  end
  local answer, err = rpc.worktree(arg)
  if not answer then
    local said = tostring(err)
    vim.notify(said:match("agent: .*") or ("agent: cannot %s: %s"):format(doing, said), vim.log.levels.ERROR)
  end
  return answer
end

-- `:Agent diff base`: what the worktree changed since the commit it started from, in the
-- quickfix list (each `M path`, opening the worktree's file).
function H.diff_base()
  local answer = H.worktree_request({ action = "changes" }, "list the worktree's changes")
  if not answer then
    return false
  end
  local files = answer.files or {}
  if #files == 0 then
    vim.notify(("agent: %s has changed nothing since %s"):format(answer.branch, answer.base), vim.log.levels.INFO)
    return false
  end
  local items = vim.tbl_map(function(file)
    return { filename = answer.dir .. "/" .. file.path, lnum = 1, text = file.status .. " " .. file.path }
  end, files)
  vim.fn.setqflist({}, " ", {
    title = ("agent: what %s changed since %s"):format(answer.branch, answer.base),
    items = items,
  })
  vim.cmd("botright copen")
  return true
end

--- The current conversation's prompts a rewind can go back to, the newest first (see :help
--- agent-rewind): each `{ turn, id, row }`, `row` being how :Agent rewind lists it. Starts the
--- backend if it is not running. Nil (after saying why) when there is nothing to rewind to.
---@return agent.RewindPoint[]?
function M.rewind_points()
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return nil
  end
  local points, err = rpc.rewind_points()
  if not points then
    -- The backend's own message (it starts with `agent:`), without the RPC error's prefix.
    local said = tostring(err)
    vim.notify(said:match("agent: .*") or ("agent: cannot list the rewind points: " .. said), vim.log.levels.ERROR)
    return nil
  end
  return points
end

--- Goes back to before prompt `n` of the current conversation (see :help agent-rewind): "code"
--- puts every file back as it was before it, "conversation" cuts the history there (the prompt's
--- text goes back in the input), "both" does both. Files with unsaved changes in Neovim block it
--- (nothing changes, and the message names them). `rewind("undo")` puts the code back as it was
--- before the last rewind. Without `n`, picks a prompt with vim.ui.select; without `mode`, asks
--- what to restore.
---@param n? integer|"undo" the prompt's number, as :Agent rewind lists it
---@param mode? "code"|"conversation"|"both"
---@param others? "keep"|"restore" what to do with the files other open conversations of the
--- workspace changed since that prompt; nil: ask when there are any (|agent-conversations|)
function M.rewind(n, mode, others)
  H.this(H.rewind, n, mode, others)
end

function H.rewind(n, mode, others)
  if n == nil then
    require("agent.pickers").rewind(M)
    return
  end
  if n == "undo" then
    n, mode = 0, "undo"
  elseif type(n) ~= "number" or n < 1 or n % 1 ~= 0 then
    vim.notify(
      'agent: rewind needs a prompt number (1, 2, ...) as :Agent rewind lists them, or "undo"',
      vim.log.levels.ERROR
    )
    return
  end
  if mode == nil then
    require("agent.pickers").rewind_mode(M, n)
    return
  end
  if mode ~= "code" and mode ~= "conversation" and mode ~= "both" and mode ~= "undo" then
    vim.notify(
      ("agent: rewind's mode should be code, conversation or both, not %s"):format(vim.inspect(mode)),
      vim.log.levels.ERROR
    )
    return
  end
  H.ensure_init()
  if require("agent.chat").busy() then
    vim.notify("agent: a turn is running; wait for it or cancel it (:Agent stop) before rewinding", vim.log.levels.WARN)
    return
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local conversations = require("agent.conversations")
  if (mode == "both" or mode == "conversation") and conversations.in_tab() == conversations.active() then
    -- Where the cut shows, and the prompt comes back to (its own tab page's chat).
    require("agent.chat").open({ focus = false })
  end
  rpc.rewind(n, mode, others)
end

---@class agent.Status
---@field state "off"|"idle"|"thinking"|"writing"|"running"|"approval"|"retrying"|"compacting"
---@field text string what the chat's winbar shows: "idle", "thinking", "running `cargo test` 12s", "waiting for approval"
---@field input integer input tokens of the current (or last) turn
---@field output integer output tokens of the current (or last) turn
---@field cached integer of `input`, those read from the provider's prompt cache
---@field cost? number what the conversation has cost in dollars; nil when a price is unknown
---@field provider? string
---@field model? string

--- A short status for a statusline: `agent: running cargo test 12s`, `agent: waiting for
--- approval`, `agent: idle · $0.42`, or "" when no conversation has started (or the plugin is
--- not loaded). Cheap enough for every redraw: no RPC, one string. See :help agent-statusline.
---@return string
function M.statusline()
  local conversations = package.loaded["agent.conversations"]
  -- Only the conversations with something to say (a prompt was sent): one alone speaks for
  -- itself; several are counted (`agent: 2 running · 1 waiting`).
  local said = {}
  for _, conversation in ipairs(conversations and conversations.all() or {}) do
    local line = conversations.acting(conversation.id, function()
      return require("agent.chat.status").line()
    end)
    if line ~= "" then
      said[#said + 1] = { conversation = conversation, line = line }
    end
  end
  if #said <= 1 then
    return said[1] and said[1].line or ""
  end
  local running, waiting, idle = 0, 0, 0
  for _, one in ipairs(said) do
    local conversation = one.conversation
    local state = conversations.acting(conversation.id, function()
      return require("agent.chat").status().state
    end)
    if state == "approval" or H.question_of(conversation.id) then
      waiting = waiting + 1
    elseif state == "idle" then
      idle = idle + 1
    elseif state ~= "off" then
      running = running + 1
    end
  end
  local parts = {}
  if running > 0 then
    parts[#parts + 1] = running .. " running"
  end
  if waiting > 0 then
    parts[#parts + 1] = waiting .. " waiting"
  end
  if #parts == 0 and idle > 0 then
    parts[1] = idle .. " idle"
  end
  return #parts > 0 and ("agent: " .. table.concat(parts, " · ")) or ""
end

--- The agent's state, for statuslines: the current tab page's conversation's (else the last one
--- used). See :help agent-statusline.
---@return agent.Status
function M.status()
  local conversations = package.loaded["agent.conversations"]
  if not (conversations and conversations.all()[1]) then
    return { state = "off", text = "off", input = 0, output = 0, cached = 0 }
  end
  return require("agent.chat").status()
end

--- Drives an external agent over the Agent Client Protocol from the same chat and picker:
--- `name` is one from `setup({ acp = { agents = { name = { cmd = {...}, env = {...}, sandbox = true } } } })` or a
--- preset (lua/agent/acp_presets.json). Prompts go to it until |:Agent| new.
---@param name? string
function M.acp(name)
  H.ensure_init()
  if not name or name == "" then
    vim.notify(
      "agent: :Agent acp needs an agent name: " .. table.concat(require("agent.command").acp_names(), ", "),
      vim.log.levels.ERROR
    )
    return
  end
  local configured = (require("agent.config").options.acp.agents or {})[name]
  if not configured and not vim.tbl_contains(require("agent.command").acp_presets(), name) then
    vim.notify(
      ("agent: no ACP agent named '%s'; use one of %s, or add it to setup({ acp = { agents = { ... } } })"):format(
        name,
        table.concat(require("agent.command").acp_names(), ", ")
      ),
      vim.log.levels.ERROR
    )
    return
  end
  local conversations = require("agent.conversations")
  if configured and configured.worktree then
    -- `worktree = true`: the agent works in a git worktree of its own, in a conversation of its
    -- own (a new tab page when this one shows one).
    local before = conversations.in_tab()
    M.new({ worktree = true })
    if conversations.in_tab() == before then
      -- Not made (past max_conversations): said.
      return
    end
  else
    M.open({ focus = false })
  end
  local conversation = conversations.in_tab()
  if not conversation then
    return
  end
  conversations.acting(
    conversation.id,
    require("agent.rpc").acp,
    name,
    configured and configured.cmd,
    configured and configured.env,
    configured and configured.sandbox,
    configured and configured.directories
  )
end

--- What the ask mapping would send about the cursor now (tests, and to see it).
---@return string?
function M._context()
  local context = require("agent.context.ask").cursor()
  return context and context.text
end

--- Goes to the question waiting for an answer: shows it again when it was hidden (`<Esc>`),
--- gives it focus when it was shown beside what you typed (`:Agent approve`, `keymaps.approve`).
function M.approve()
  local approval = package.loaded["agent.approval"] and require("agent.approval")
  if (not approval or approval.pending() == 0) and package.loaded["agent.elicit"] then
    local elicit = require("agent.elicit")
    if elicit.waiting() then
      elicit.focus()
      return
    end
  end
  if not approval then
    vim.notify("agent: no question is waiting")
    return
  end
  approval.focus()
end

--- :Agent's implementation (plugin/agent.lua calls it; lua/agent/command.lua parses it).
---@param cmd table the argument of nvim_create_user_command's callback
function M._command(cmd)
  require("agent.command").run(M, cmd)
end

--- :Agent's completion (lua/agent/command.lua).
---@param arglead string
---@param cmdline string
---@return string[]
function M._complete(arglead, cmdline)
  return require("agent.command").complete(M, arglead, cmdline)
end

-- Highlight groups: links to built-ins, `default` so a colorscheme or the user can override them.
H.highlights = {
  AgentHeader = "Title", -- an external agent's `Plan`
  AgentUserHeader = "Title", -- `## You`
  AgentAgentHeader = "Function", -- `## Agent`
  AgentToolRow = "Special", -- `▸ read src/a.rs (120 chars)`
  AgentToolRunning = "DiagnosticWarn", -- `… running run_bash (3s)`
  AgentToolFailed = "DiagnosticError", -- `✗ $ cargo test -> exit 124`: a failed result
  AgentToolError = "AgentToolFailed", -- the older name of AgentToolFailed
  AgentToolExit = "DiagnosticWarn", -- `▸ $ cargo test -> exit 101`: a command that exited non-zero
  AgentToolOutput = "Comment", -- a tool's output, below its row (folded)
  AgentAttachment = "Special", -- `@ src/calc.py (116 chars)` under a prompt (its text folded)
  AgentNotice = "Comment", -- `done · 10 in / 20 out tokens`, retries, approval decisions
  AgentError = "DiagnosticError", -- an error from the backend
  AgentOutside = "DiagnosticWarn", -- `2 files changed by claude without asking agent.nvim: ...`
  AgentInputHint = "Comment", -- the hint in the empty input window
  AgentThought = "Comment", -- an external agent's thinking (ACP), folded
  AgentRewound = "Comment", -- `rewound to before prompt 3: ...` and the turns folded under it
  AgentBranch = "Comment", -- `branch 2 of 3 · [ / ]` after a prompt's header
  AgentDiffAdd = "DiffAdd", -- `+` lines in the approval preview
  AgentDiffDelete = "DiffDelete", -- `-` lines
  AgentDiffHeader = "DiffChange", -- `---`, `+++` and `@@` lines
  AgentDiffDropped = "Comment", -- a hunk dropped in the approval preview (not written)
  AgentApprovalTitle = "FloatTitle", -- the picker's title (what is about to happen)
  AgentApprovalKey = "Special", -- the keys beside each choice
  AgentApprovalSelected = "PmenuSel", -- the highlighted choice
  AgentElicitField = "Identifier", -- a field's title in an agent's form (ACP elicitation)
  AgentElicitHost = "DiagnosticWarn", -- the host of the page an agent asks you to open
  AgentFollowed = "IncSearch", -- follow mode: the lines an edit changed, for a moment
  AgentInlineRemoved = "AgentInlineRemovedAuto", -- an inline edit's proposal: the lines a hunk
  --                        removes (DiffDelete, or a red-tinted background where it has none)
  AgentInlineAdded = "DiffAdd", -- the lines it adds (virtual lines below them), a kept hunk's sign
  AgentInlineSign = "Removed", -- the `-` sign of a hunk not decided yet
  AgentInlineHint = "Comment", -- `hunk 1/2 · ga keep · gs drop · ? more`
  AgentInlineDropped = "Comment", -- a dropped hunk's sign and hint
  AgentInlineStale = "WarningMsg", -- a hunk whose lines you changed (never applied)
  AgentInlineSpinner = "MoreMsg", -- `⠋ agent: writing` while the model writes
}

function H.define_highlights()
  for group, link in pairs(H.highlights) do
    vim.api.nvim_set_hl(0, group, { link = link, default = true })
  end
  -- Ours alone, so set again whatever it was: DiffDelete where it has a background; where it
  -- only colours text (the default scheme), removed lines would read as ordinary ones, so a
  -- red-tinted background of their own, for the background in use.
  if H.has_background("DiffDelete") then
    vim.api.nvim_set_hl(0, "AgentInlineRemovedAuto", { link = "DiffDelete" })
  else
    local dark = vim.o.background == "dark"
    vim.api.nvim_set_hl(0, "AgentInlineRemovedAuto", {
      bg = dark and "#4a1f22" or "#ffd8d8",
      ctermbg = dark and 52 or 224,
    })
  end
end

--- True when highlight group `name` (its links followed) has a background.
function H.has_background(name)
  local ok, hl = pcall(vim.api.nvim_get_hl, 0, { name = name, link = false })
  return ok and (hl.bg ~= nil or hl.ctermbg ~= nil or hl.reverse == true)
end

function H.create_autocommands()
  local group = vim.api.nvim_create_augroup("agent", { clear = true })
  -- Where the focus is, for the notice when a turn ends unseen (|agent-notify|).
  require("agent.notice").watch()
  -- When a key was last typed: a question does not take the focus of a person typing.
  require("agent.keys").watch()
  -- Which buffers hold a file on disk: one deleted later is said once, not E211 at each check.
  require("agent.rpc.buffers").watch()
  vim.api.nvim_create_autocmd("WinEnter", {
    group = group,
    desc = "agent: the last window you were in, where follow mode opens files (:help agent-follow)",
    callback = function()
      require("agent.follow").entered(vim.api.nvim_get_current_win())
    end,
  })
  vim.api.nvim_create_autocmd("ColorScheme", {
    group = group,
    desc = "agent: re-apply highlight links",
    callback = H.define_highlights,
  })
  vim.api.nvim_create_autocmd("OptionSet", {
    group = group,
    pattern = "background",
    desc = "agent: highlights of our own for the new background",
    callback = H.define_highlights,
  })
end

-- Runs fn(...) for the current tab page's conversation (made there when it has none), or for
-- the one acted for (a chat's keys); nil after saying why when no more may be made.
function H.here(fn, ...)
  H.ensure_init()
  local conversations = require("agent.conversations")
  local conversation, err = conversations.here()
  if not conversation then
    vim.notify(err, vim.log.levels.ERROR)
    return nil
  end
  return conversations.acting(conversation.id, fn, ...)
end

-- `fn`, run later for the conversation acted for now (a float's key, pressed after).
function H.this_acting(fn)
  local id = require("agent.conversations").active().id
  return function(...)
    return require("agent.conversations").acting(id, fn, ...)
  end
end

-- Runs fn(...) for one conversation throughout (a picker's answer included): the one acted for
-- (a chat's keys), else the current tab page's, else the last one used (`:Agent stop` from a
-- proposal's tab page). Never makes one.
function H.this(fn, ...)
  H.ensure_init()
  local conversations = require("agent.conversations")
  return conversations.acting(conversations.active().id, fn, ...)
end

-- How many questions of conversation `id` wait for an answer.
function H.question_of(id)
  return package.loaded["agent.approval"] ~= nil and require("agent.approval").pending_of(id) > 0
end

-- Autocommands and highlights also without setup(), and what each chat's keys do (the chat
-- never requires this module): done once, on first use; each conversation's keys act for it.
function H.ensure_init()
  if H.initialized then
    return
  end
  H.initialized = true
  local conversations = require("agent.conversations")
  -- The tab labels name the conversations while several are open.
  conversations.on_changed(require("agent.tabline").update)
  conversations.on_made(function(conversation)
    local id = conversation.id
    local function acting(fn)
      return function(...)
        return conversations.acting(id, fn, ...)
      end
    end
    conversation.chat.set_actions({
      submit = acting(function(text)
        -- `/new`, `/diff`... run here (see :help agent-slash); anything else is a prompt.
        local handled, refused = require("agent.slash").run(text, M)
        if refused then
          return false -- an unknown `/word`: the input keeps it
        end
        if handled then
          return handled
        end
        -- Taken once the prompt went: refused (a turn running), the edit stays one.
        local chat = require("agent.chat")
        local branch = chat.editing()
        local sent = M.ask(text, branch and { branch = branch } or nil)
        if sent and branch then
          chat.take_editing()
        end
        return sent
      end),
      cancel = acting(function()
        M.stop()
      end),
      approve = function()
        M.approve()
      end,
      review = acting(function(checkpoint, only)
        M.diff({ since = checkpoint, only = only })
      end),
      undo_outside = acting(function(row)
        H.undo_outside(row)
      end),
      fork = acting(function(row)
        local turn = require("agent.chat").prompt_at(row)
        if not turn then
          local key = require("agent.config").options.keymaps.chat.fork
          vim.notify(
            ("agent: `%s` forks from before the prompt (## You) the cursor is on"):format(key),
            vim.log.levels.INFO
          )
          return
        end
        M.fork({ turn = turn })
      end),
      paste_image = acting(function(buf)
        require("agent.clipboard").paste(buf)
      end),
      edit_prompt = acting(function(row)
        H.edit_prompt(row)
      end),
      regenerate = acting(function(row)
        local chat = require("agent.chat")
        local last = chat.prompt_count()
        local at = chat.turn_at(row)
        if not at or at ~= last then
          local key = require("agent.config").options.keymaps.chat.regenerate
          vim.notify(
            ("agent: `%s` asks again for the last answer: put the cursor on it"):format(key),
            vim.log.levels.INFO
          )
          return
        end
        M.regenerate(last)
      end),
      switch_branch = acting(function(row, step)
        local turn = require("agent.chat").prompt_at(row)
        if not turn then
          local keys = require("agent.config").options.keymaps.chat
          vim.notify(
            ("agent: `%s` and `%s` switch branches on a prompt (## You) that has them"):format(
              keys.branch_prev,
              keys.branch_next
            ),
            vim.log.levels.INFO
          )
          return
        end
        M.switch_branch(turn, step)
      end),
      undo_edit = acting(function(diff, exact, workspace)
        require("agent.undo").edit(diff, workspace or require("agent.rpc").workspace(), exact)
      end),
      rewind_others = acting(function(event)
        require("agent.pickers").rewind_others(M, event)
      end),
      idle = acting(function()
        H.send_queued()
      end),
    })
    conversation.chat.on_input(function(buf)
      require("agent.context").setup_input(buf)
    end)
  end)
  if not require("agent.config").did_setup then
    H.create_autocommands()
    H.define_highlights()
  end
end

-- The keys mapped by the last setup() call, removed when setup() runs again.
H.mapped = {}

function H.apply_keymaps(keymaps)
  for _, map in ipairs(H.mapped) do
    pcall(vim.api.nvim_del_keymap, map[1], map[2])
  end
  H.mapped = {}
  for _, pair in ipairs({
    { "<Plug>(agent-ask)", "<leader>aa", keymaps.ask, "agent: ask" },
    { "<Plug>(agent-edit)", "<leader>ae", keymaps.edit, "agent: edit in place" },
  }) do
    local plug, default, lhs, desc = pair[1], pair[2], pair[3], pair[4]
    for _, mode in ipairs({ "n", "x" }) do
      -- The default key plugin/agent.lua may have mapped before setup() ran.
      local existing = vim.fn.maparg(default, mode, false, true)
      if type(existing) == "table" and existing.rhs == plug then
        pcall(vim.api.nvim_del_keymap, mode, default)
      end
      if lhs then
        vim.api.nvim_set_keymap(mode, lhs, plug, { desc = desc })
        H.mapped[#H.mapped + 1] = { mode, lhs }
      end
    end
  end
end

return M
