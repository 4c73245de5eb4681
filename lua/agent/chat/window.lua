--- The chat's buffers and windows: `agent: chat` (the conversation, markdown, never edited by
--- hand) above `agent: input` (the prompt being written), their window options and keys.
--- Windows are never entered but on request: the user's cursor and focus stay where they are.

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local M = {}
local H = {}

--- The number of the conversation this chat shows.
M.conversation = select(2, ...) ---@type integer

-- Names that read well where Neovim shows a buffer's name (a tab page's label, a statusline):
-- `agent: chat`, where `agent://chat` was shortened to `a//chat`. The first conversation's are
-- just that; another's carry its number (`agent: chat 2`).
H.suffix = M.conversation == 1 and "" or (" " .. M.conversation)
H.CHAT = "agent: chat" .. H.suffix
H.INPUT = "agent: input" .. H.suffix
H.INPUT_HEIGHT = 5
H.ns_hint = vim.api.nvim_create_namespace("agent.input.hint")

--- The chat buffer, when it exists.
M.buf = nil ---@type integer?
--- The input buffer, when it exists.
M.input_buf = nil ---@type integer?

H.editing = nil ---@type integer? the prompt the input's text branches from (`e` on it)

--- What the keys of the two buffers do, set by require("agent") (the chat never requires it):
--- `submit(text)` sends a prompt and returns whether it was sent; `cancel()` stops the turn;
--- `review(checkpoint, only?)` lists what changed since a prompt's checkpoint (:Agent diff),
--- only the files of `only` when given; `undo_outside(row)` puts back the files of an agent's
--- changes-made-by-itself row; `rewind_others(event)` asks what a rewind does with other conversations' later changes.
M.actions = {
  submit = function()
    return false
  end,
  cancel = function() end,
  review = function() end,
}

--- The finished row at a (0-based) row of the chat and its whole output (chat/init.lua sets it).
---@type fun(row: integer): table?, string?
M.output_at = function()
  return nil, nil
end

--- The checkpoint a chat row (0-based) offers the diff of (a `done` row, or an agent's
--- changes made by itself, then with that row), set by the chat.
---@type fun(row: integer): string?, table?
M.checkpoint_at = function()
  return nil, nil
end

--- Called with each new chat window (folds are per window: the renderer puts them back).
---@type fun(win: integer)?
M.on_chat_window = nil

--- Called with each new input buffer (its completion: agent.context).
---@type fun(buf: integer)?
M.on_input_buffer = nil

--- Makes the buffers that are missing.
---@return boolean new_chat true when the chat buffer was (re)made: what was written is gone
function M.ensure_buffers()
  local new_chat = false
  if not (M.buf and vim.api.nvim_buf_is_valid(M.buf)) then
    new_chat = true
    local buf = H.scratch(H.CHAT)
    M.buf = buf
    vim.bo[buf].undolevels = -1 -- nothing to undo, and no memory spent on it
    vim.bo[buf].modifiable = false
    -- A list item's wrapped lines start under its text, not under its marker (H.chat_window's
    -- breakindentopt `list:-1` measures the marker with this pattern).
    vim.bo[buf].formatlistpat = [[^\s*\(\d\+[.)]\|[-*+]\)\s\+]]
    H.plain(buf)
    vim.schedule(function()
      H.plain(buf) -- FileType handlers that start treesitter later
    end)
    vim.api.nvim_create_autocmd("BufWinEnter", {
      buffer = buf,
      desc = "agent: keep the chat's highlighting cost flat",
      callback = function()
        H.plain(buf)
      end,
    })
    local maps = {
      { "n", "<CR>", H.toggle_fold, "agent: show or hide the tool output under the cursor" },
      { "n", "<C-c>", H.cancel, "agent: stop the running turn" },
      { "n", "d", H.review, "agent: on a `done` row, list what its prompt changed (:Agent diff)" },
      {
        "n",
        "?",
        function()
          require("agent.keyhelp").show(buf, "chat")
        end,
        "agent: the keys of this window",
      },
    }
    local approve = require("agent.config").options.keymaps.approve
    if approve then
      maps[#maps + 1] = { "n", approve, H.approve, "agent: go to the waiting question (:Agent approve)" }
    end
    local output_key = require("agent.config").options.keymaps.chat.output
    if output_key then
      maps[#maps + 1] = { "n", output_key, H.show_output, "agent: a finished row's whole output, as the model read it" }
    end
    local fork_key = require("agent.config").options.keymaps.chat.fork
    if fork_key then
      maps[#maps + 1] = { "n", fork_key, H.fork_here, "agent: on a prompt, fork the conversation from before it" }
    end
    local chat_keys = require("agent.config").options.keymaps.chat
    local branch_maps = {
      { chat_keys.edit, H.edit_here, "agent: on a prompt, put its text in the input to send as a new branch" },
      { chat_keys.regenerate, H.regenerate_here, "agent: on the last answer, ask for it again as a new branch" },
      { chat_keys.branch_prev, H.branch_step(-1), "agent: on a prompt with branches, the branch before" },
      { chat_keys.branch_next, H.branch_step(1), "agent: on a prompt with branches, the branch after" },
    }
    for _, map in ipairs(branch_maps) do
      if map[1] then
        maps[#maps + 1] = { "n", map[1], map[2], map[3] }
      end
    end
    local undo_key = require("agent.config").options.keymaps.chat.undo
    if undo_key then
      maps[#maps + 1] = { "n", undo_key, H.undo_edit, "agent: on an edit's row, undo that edit" }
    end
    H.keymaps(buf, maps)
  end
  if not (M.input_buf and vim.api.nvim_buf_is_valid(M.input_buf)) then
    local buf = H.scratch(H.INPUT)
    M.input_buf = buf
    local maps = {
      { "n", "<CR>", H.submit, "agent: send the prompt" },
      { { "n", "i" }, "<C-s>", H.submit, "agent: send the prompt" },
      { "n", "<C-c>", H.cancel, "agent: stop the running turn" },
      {
        "n",
        "?",
        function()
          require("agent.keyhelp").show(buf, "input", { "n", "i" })
        end,
        "agent: the keys of this window",
      },
    }
    local approve = require("agent.config").options.keymaps.approve
    if approve then
      maps[#maps + 1] = { { "n", "i" }, approve, H.approve, "agent: go to the waiting question (:Agent approve)" }
    end
    local paste = require("agent.config").options.keymaps.paste_image
    -- Insert mode only: in Normal mode <C-v> starts a blockwise selection people use.
    local paste_modes = paste and M.unshadowed(paste, { "i" }) or {}
    if #paste_modes > 0 then
      maps[#maps + 1] = {
        paste_modes,
        paste,
        function()
          if M.actions.paste_image then
            M.actions.paste_image(buf)
          end
        end,
        "agent: paste the clipboard's image (:help agent-images)",
      }
    end
    H.keymaps(buf, maps)
    vim.api.nvim_create_autocmd({ "TextChanged", "TextChangedI", "BufWinEnter" }, {
      buffer = buf,
      desc = "agent: the input's hint when it is empty",
      callback = function()
        H.hint(buf)
      end,
    })
    H.hint(buf)
    if M.on_input_buffer then
      M.on_input_buffer(buf)
    end
  end
  return new_chat
end

--- The modes of `modes` in which `key` has no global mapping (the person's, or a plugin's):
--- a default key never shadows one.
---@param key string
---@param modes string[]
---@return string[]
function M.unshadowed(key, modes)
  return vim.tbl_filter(H.unmapped(key), modes)
end

function H.unmapped(key)
  return function(mode)
    local map = vim.fn.maparg(key, mode, false, true)
    return vim.tbl_isempty(map) or map.buffer == 1
  end
end

--- Opens the split (chat above, input below) in the current tab page where it is missing.
---@param focus? boolean put the cursor in the input window
function M.open(focus)
  local config = require("agent.config")
  local chat_win = M.window(M.buf)
  if not chat_win then
    chat_win = vim.api.nvim_open_win(M.buf, false, {
      split = config.options.window.side,
      win = -1,
      width = config.window_width(),
    })
    H.setup_chat_window(chat_win)
  end
  local input_win = M.window(M.input_buf)
  if not input_win then
    input_win = vim.api.nvim_open_win(M.input_buf, false, {
      split = "below",
      win = chat_win,
      height = H.INPUT_HEIGHT,
    })
    H.setup_input_window(input_win)
  end
  if focus then
    vim.api.nvim_set_current_win(input_win)
  end
  H.watch_layout()
end

--- The chat's width rule again in every tab page, for the screen as it is now (so the code
--- window keeps its share); run when the screen is resized. A chat the person made wider
--- keeps its width otherwise.
function M.fit()
  local width = require("agent.config").window_width()
  for _, win in ipairs(M.chat_windows()) do
    -- Only beside other windows: a chat alone in its tab page is as wide as the screen.
    local tab = vim.api.nvim_win_get_tabpage(win)
    local beside = vim.fn.winlayout(vim.api.nvim_tabpage_get_number(tab))[1] == "row"
    if beside and vim.api.nvim_win_get_config(win).relative == "" then
      pcall(vim.api.nvim_win_set_width, win, width)
    end
  end
end

--- The height each input window keeps (by window): 5, or what the person made it while in it.
H.heights = {}

--- Keeps the layout in shape once the chat has been opened: the width rule on a resized
--- screen, and the input's height when a window beside it closes (a quickfix list's rows must
--- not go to the input).
function H.watch_layout()
  if H.layout_group then
    return
  end
  H.layout_group = vim.api.nvim_create_augroup("agent.chat.layout." .. M.conversation, { clear = true })
  vim.api.nvim_create_autocmd("VimResized", {
    group = H.layout_group,
    desc = "agent: the chat's width rule for the new screen size",
    callback = function()
      M.fit()
    end,
  })
  vim.api.nvim_create_autocmd("WinResized", {
    group = H.layout_group,
    desc = "agent: the input's height as the person sets it",
    callback = function()
      -- Resized while the person is in it (:resize, a drag): theirs to keep.
      local win = vim.api.nvim_get_current_win()
      if M.input_buf and vim.api.nvim_win_get_buf(win) == M.input_buf then
        for _, resized in ipairs(vim.v.event.windows or {}) do
          if resized == win then
            H.heights[win] = vim.api.nvim_win_get_height(win)
          end
        end
      end
    end,
  })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = H.layout_group,
    desc = "agent: the input keeps its height when another window closes",
    callback = function(args)
      local closing = tonumber(args.match)
      H.heights[closing or -1] = nil
      -- A float (a menu, a hover, a picker) takes no rows from anyone.
      if
        not closing
        or not vim.api.nvim_win_is_valid(closing)
        or vim.api.nvim_win_get_config(closing).relative ~= ""
      then
        return
      end
      -- Once the window is gone and its rows given out.
      vim.schedule(function()
        if not (M.input_buf and vim.api.nvim_buf_is_valid(M.input_buf)) then
          return
        end
        for _, win in ipairs(vim.fn.win_findbuf(M.input_buf)) do
          local height = H.heights[win] or H.INPUT_HEIGHT
          if vim.api.nvim_win_get_height(win) ~= height then
            pcall(vim.api.nvim_win_set_height, win, height)
          end
        end
      end)
    end,
  })
end

--- The window showing `buf` in the current tab page.
---@param buf? integer
---@return integer?
function M.window(buf)
  if not buf then
    return nil
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_win_get_buf(win) == buf then
      return win
    end
  end
  return nil
end

--- Every window showing the chat, in any tab page.
---@return integer[]
function M.chat_windows()
  return M.buf and vim.fn.win_findbuf(M.buf) or {}
end

--- True when the chat is shown in the current tab page.
---@return boolean
function M.visible()
  return M.window(M.buf) ~= nil
end

--- Moves the cursor out of the agent's windows (to the previous window, else a new one).
function M.leave()
  local function ours()
    local buf = vim.api.nvim_get_current_buf()
    return buf == M.buf or buf == M.input_buf
  end
  if not ours() then
    return
  end
  vim.cmd("wincmd p")
  if ours() then
    local side = require("agent.config").options.window.side
    vim.cmd((side == "right" and "topleft" or "botright") .. " vnew")
  end
end

-- Helpers ------------------------------------------------------------------------------------

function H.scratch(name)
  -- Found by the mark it was made with: a name without `://` is made a path, whose full form
  -- depends on the directory Neovim was in.
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.b[buf].agent_buffer == name then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.b[buf].agent_buffer = name
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "markdown"
  return buf
end

-- Markdown's regex syntax and a treesitter highlighter (a user's FileType autocommand may start
-- one) re-parse the buffer as it grows: off for the chat, which highlights its markdown itself
-- at a cost that does not grow (chat/markdown.lua). The filetype stays markdown, so the user's
-- own markdown plugins still work on it.
function H.plain(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local highlighter = package.loaded["vim.treesitter.highlighter"]
  if highlighter and highlighter.active[buf] then
    pcall(vim.treesitter.stop, buf)
  end
  if vim.bo[buf].syntax ~= "OFF" then
    vim.bo[buf].syntax = "OFF"
  end
end

function H.keymaps(buf, maps)
  for _, map in ipairs(maps) do
    vim.keymap.set(map[1], map[2], map[3], { buffer = buf, desc = map[4], nowait = true, silent = true })
  end
end

--- Puts `text` in the input, for sending as a new branch from before prompt `turn`; the cursor
--- goes to its end.
---@param text string
---@param turn integer
function M.edit_in_input(text, turn)
  local buf = M.input_buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  H.editing = turn
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(text, "\n", { plain = true }))
  local win = vim.fn.bufwinid(buf)
  if win ~= -1 then
    vim.api.nvim_set_current_win(win)
    local last = vim.api.nvim_buf_line_count(buf)
    vim.api.nvim_win_set_cursor(win, { last, #(vim.api.nvim_buf_get_lines(buf, last - 1, last, false)[1] or "") })
  end
  H.hint(buf)
end

--- The prompt the input's text branches from, if it does.
---@return integer?
function M.editing()
  return H.editing
end

--- The prompt the input's text branches from, forgotten as it is taken.
---@return integer?
function M.take_editing()
  local turn = H.editing
  H.editing = nil
  if M.input_buf and vim.api.nvim_buf_is_valid(M.input_buf) then
    H.hint(M.input_buf)
  end
  return turn
end

function H.hint(buf)
  vim.api.nvim_buf_clear_namespace(buf, H.ns_hint, 0, -1)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, 2, false)
  local empty = #lines == 1 and lines[1] == ""
  if empty then
    H.editing = nil
  elseif H.editing then
    -- Under the text, short enough for a narrow input window.
    local last = vim.api.nvim_buf_line_count(buf) - 1
    vim.api.nvim_buf_set_extmark(buf, H.ns_hint, last, 0, {
      virt_lines = { { { ("↳ new branch of prompt %d; old one kept"):format(H.editing), "AgentInputHint" } } },
    })
  end
  if empty then
    vim.api.nvim_buf_set_extmark(buf, H.ns_hint, 0, 0, {
      virt_text = { { "Ask the agent… <C-s> sends · ? keys", "AgentInputHint" } },
      virt_text_pos = "overlay",
    })
  end
end

function H.window_options(win, options)
  for name, value in pairs(options) do
    vim.api.nvim_set_option_value(name, value, { win = win, scope = "local" })
  end
end

-- What the chat and the input windows share: no gutter, soft-wrapped text.
H.plain_window = {
  number = false,
  relativenumber = false,
  signcolumn = "no",
  foldcolumn = "0",
  statuscolumn = "",
  colorcolumn = "",
  wrap = true,
  linebreak = true,
  winfixwidth = true,
}

function H.setup_chat_window(win)
  H.window_options(win, H.plain_window)
  H.window_options(win, {
    spell = false,
    list = false,
    foldenable = true,
    foldmethod = "manual",
    foldlevel = 0,
    foldminlines = 0,
    foldtext = "v:lua.require'agent.chat.fold'.foldtext()",
    fillchars = "fold: ,eob: ",
    -- `**` and backticks hidden (chat/markdown.lua conceals them), also on the cursor's line
    -- while reading; Visual mode shows them, for copying. `:setlocal conceallevel=0` shows them.
    conceallevel = 2,
    concealcursor = "nc",
    -- A wrapped line keeps its indent, and a list item's its text's column.
    breakindent = true,
    breakindentopt = "list:-1",
  })
  if M.on_chat_window then
    M.on_chat_window(win)
  end
  vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(M.buf), 0 })
  local input_buf = M.input_buf
  vim.api.nvim_create_autocmd("WinClosed", {
    pattern = tostring(win),
    once = true,
    desc = "agent: close the input with its chat",
    callback = function()
      vim.schedule(function()
        local input_win = M.window(input_buf)
        if input_win and #vim.api.nvim_tabpage_list_wins(0) > 1 then
          pcall(vim.api.nvim_win_close, input_win, false)
        end
      end)
    end,
  })
end

function H.setup_input_window(win)
  H.window_options(win, H.plain_window)
  H.window_options(win, {
    winfixheight = true,
    fillchars = "eob: ",
  })
end

function H.toggle_fold()
  if vim.fn.foldlevel(".") > 0 then
    vim.cmd("normal! za")
  end
end

function H.cancel()
  M.actions.cancel()
end

--- Goes to the waiting question (lua/agent/approval.lua). From Insert mode too: the question
--- then takes the focus the person gives it, and gives it back, in Insert mode, once answered.
function H.approve()
  M.actions.approve()
end

H.outputs_opened = 0

-- Forks the conversation from before the prompt under the cursor.
function H.fork_here()
  M.actions.fork(vim.fn.line(".") - 1)
end

--- The prompt whose block holds a (0-based) row of the chat, set by the chat.
---@type fun(row: integer): integer?
M.prompt_at = function()
  return nil
end

--- Whether the prompt at a (0-based) row has other branches, set by the chat.
---@type fun(row: integer): boolean
M.branched_at = function()
  return false
end

-- The chat's keys for branches (:help agent-branches), each acting on the cursor's row; off a
-- prompt (one with branches, for `[` and `]`), the key is Neovim's own.
function H.edit_here()
  local row = vim.fn.line(".") - 1
  if M.actions.edit_prompt and M.prompt_at(row) then
    M.actions.edit_prompt(row)
  else
    vim.cmd("normal! " .. vim.v.count1 .. "e")
  end
end

function H.regenerate_here()
  if M.actions.regenerate then
    M.actions.regenerate(vim.fn.line(".") - 1)
  end
end

function H.branch_step(step)
  return function()
    local row = vim.fn.line(".") - 1
    if M.actions.switch_branch and M.branched_at(row) then
      M.actions.switch_branch(row, step)
      return
    end
    -- `[[`, `]c`...: the key after it, as Neovim reads it.
    local ok, key = pcall(vim.fn.getcharstr)
    if ok and key ~= "\27" then
      vim.cmd("normal! " .. (step < 0 and "[" or "]") .. key)
    end
  end
end

-- Undoes the edit whose row is under the cursor, when its file has not changed since.
function H.undo_edit()
  local _, outside = M.checkpoint_at(vim.fn.line(".") - 1)
  if outside then
    M.actions.undo_outside(outside)
    return
  end
  local tool = M.output_at(vim.fn.line(".") - 1)
  if not (tool and tool.ok and tool.diff) then
    local key = require("agent.config").options.keymaps.chat.undo
    vim.notify(
      ("agent: `%s` undoes the edit whose row (▸ edit ...) the cursor is on"):format(key),
      vim.log.levels.INFO
    )
    return
  end
  M.actions.undo_edit(tool.diff, tool.diff_exact, tool.workspace)
end

-- The whole output of the finished row under the cursor, as the model read it (the cut marker
-- of a long one included), in a read-only scratch buffer in the other window: searchable with /.
function H.show_output()
  local tool, output = M.output_at(vim.fn.line(".") - 1)
  if not output then
    local key = require("agent.config").options.keymaps.chat.output
    local what = tool and "this row has no output" or ("`%s` works on a finished row (▸ or ✗)"):format(key)
    vim.notify("agent: " .. what, vim.log.levels.INFO)
    return
  end
  if not tool.output_n then
    H.outputs_opened = H.outputs_opened + 1
    tool.output_n = H.outputs_opened
  end
  local name = "agent://output/" .. tool.output_n
  local buf
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(b) == name then
      buf = b
    end
  end
  if not buf then
    buf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(buf, name)
    vim.bo[buf].buftype = "nofile"
    vim.bo[buf].bufhidden = "hide"
    vim.bo[buf].swapfile = false
    local lines = vim.split(output, "\n", { plain = true })
    if #lines > 1 and lines[#lines] == "" then
      lines[#lines] = nil -- the newline that ends the last line
    end
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.bo[buf].modifiable = false
    vim.bo[buf].readonly = true
    vim.bo[buf].modified = false
  end
  M.leave()
  local ok, err = pcall(vim.api.nvim_win_set_buf, 0, buf)
  if not ok then
    vim.notify(("agent: cannot show %s here: %s"):format(name, tostring(err)), vim.log.levels.WARN)
  end
end

function H.review()
  local checkpoint, outside = M.checkpoint_at(vim.fn.line(".") - 1)
  if not checkpoint then
    vim.notify("agent: `d` works on a row that shows `d: diff`; or use :Agent diff", vim.log.levels.INFO)
    return
  end
  M.actions.review(checkpoint, outside and outside.outside or nil)
end

function H.submit()
  local buf = M.input_buf
  local text = vim.trim(table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
  if text == "" then
    return
  end
  if M.actions.submit(text) then
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, {})
    H.hint(buf)
  end
end

return M
