--- "Edit before allowing": the person changes a proposal, then writes it to allow their version.
---
--- An edit opens in a new tab as a diff: the file as it is on the left (read-only), the whole file
--- as the edit would leave it on the right, in `agent://proposal/{rel}`, editable. A command opens
--- in a small editable float. `:w` (or <C-s> in the command's float) hands the text to `on_write`
--- and closes what was opened; closing the proposal without writing calls `on_quit`, and the
--- request goes back to the picker. Nothing is written here: the backend writes (or runs) the
--- person's version through the same checks as an allowed proposal.

local M = {}
local H = {}

--- What is open: its buffers, windows and tab, and whether it was written.
---@type { kind: string, buf: integer, disk?: integer, tab?: integer, win?: integer, done: boolean, original: string }?
H.open = nil

--- The text of `buf` as a file holds it: its lines joined, with the last newline when `eol` is set.
function H.text(buf)
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
  if vim.bo[buf].eol then
    text = text .. "\n"
  end
  return text
end

--- Puts `text` in `buf`, the last newline kept as the buffer's 'eol' (so writing gives back the
--- same bytes when nothing was changed).
function H.fill(buf, text)
  local lines = vim.split(text, "\n", { plain = true })
  local eol = #lines > 1 and lines[#lines] == ""
  if eol then
    table.remove(lines)
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].fixendofline = false
  vim.bo[buf].eol = eol
  vim.bo[buf].modified = false
end

--- `name`, or `name (2)`, `name (3)`... while a buffer holds it already (one left from before).
function H.name(name)
  local n, candidate = 1, name
  while vim.fn.bufexists(candidate) == 1 do
    n = n + 1
    candidate = ("%s (%d)"):format(name, n)
  end
  return candidate
end

function H.buffer(name, text, editable)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  vim.bo[buf].buftype = editable and "acwrite" or "nofile"
  -- A name another buffer holds already (a proposal left from before) is not fatal.
  pcall(vim.api.nvim_buf_set_name, buf, name)
  H.fill(buf, text)
  if not editable then
    vim.bo[buf].modifiable = false
    vim.bo[buf].readonly = true
  end
  return buf
end

--- Closes `open`'s windows, tab and buffers, and stops watching them.
function H.teardown(open)
  pcall(vim.api.nvim_del_augroup_by_name, "agent.proposal")
  if open.tab and vim.api.nvim_tabpage_is_valid(open.tab) and #vim.api.nvim_list_tabpages() > 1 then
    pcall(vim.cmd.tabclose, { args = { vim.api.nvim_tabpage_get_number(open.tab) }, bang = true })
  elseif open.win and vim.api.nvim_win_is_valid(open.win) then
    pcall(vim.api.nvim_win_close, open.win, true)
  end
  for _, buf in ipairs({ open.buf, open.disk }) do
    if buf and vim.api.nvim_buf_is_valid(buf) then
      pcall(vim.api.nvim_buf_delete, buf, { force = true })
    end
  end
end

--- Ends `open` once: with the person's `text` (written) or nil (closed without writing).
function H.finish(open, text, handlers)
  if open.done then
    return
  end
  open.done = true
  if H.open == open then
    H.open = nil
  end
  H.teardown(open)
  if text then
    handlers.on_write(text)
  else
    handlers.on_quit()
  end
end

--- Writes the proposal: the person's version goes to `handlers.on_write`, and what was opened
--- closes.
function H.on_write(open, handlers)
  local text = H.text(open.buf)
  if open.kind == "command" and vim.trim(text) == "" then
    vim.notify("agent: the command is empty; write one, or :q to go back to the request", vim.log.levels.ERROR)
    return
  end
  vim.bo[open.buf].modified = false
  H.finish(open, text, handlers)
end

function H.watch(open, handlers)
  local group = vim.api.nvim_create_augroup("agent.proposal", { clear = true })
  vim.api.nvim_create_autocmd("BufWriteCmd", {
    group = group,
    buffer = open.buf,
    callback = function(args)
      -- Only `:w` of the proposal in its own window allows it: not `:wall` from elsewhere,
      -- not `:w {file}` (a copy), which would allow a half-done edit unseen.
      local target = vim.fn.fnamemodify(args.file, ":p")
      local own = vim.api.nvim_buf_get_name(open.buf)
      if (args.file ~= own and target ~= own) or vim.api.nvim_get_current_win() ~= open.win then
        vim.notify(
          "agent: write the proposal with :w in its own window; that allows it (nothing was written)",
          vim.log.levels.WARN
        )
        return
      end
      H.on_write(open, handlers)
    end,
  })
  -- :e! puts the proposal back as it came, rather than emptying the buffer.
  vim.api.nvim_create_autocmd("BufReadCmd", {
    group = group,
    buffer = open.buf,
    callback = function()
      H.fill(open.buf, open.original)
    end,
  })
  -- Closed without writing (:q!, :tabclose): back to the picker.
  vim.api.nvim_create_autocmd("BufWipeout", {
    group = group,
    buffer = open.buf,
    callback = function()
      vim.schedule(function()
        H.finish(open, nil, handlers)
      end)
    end,
  })
end

--- Opens an edit's proposal: `proposal` is the backend's `{ kind = "file", rel, now?, proposed }`.
---@param proposal { rel: string, now?: string, proposed: string }
---@param handlers { on_write: fun(text: string), on_quit: fun() }
function M.file(proposal, handlers)
  M.close()
  local rel = tostring(proposal.rel)
  -- For the winbars, where % starts an item.
  local shown = rel:gsub("%%", "%%%%")
  local filetype = vim.filetype.match({ filename = rel }) or ""
  vim.cmd("tabnew")
  local tab = vim.api.nvim_get_current_tabpage()
  local placeholder = vim.api.nvim_get_current_buf()
  local disk = H.buffer(H.name("agent://disk/" .. rel), proposal.now or "", false)
  vim.api.nvim_win_set_buf(0, disk)
  if vim.api.nvim_buf_is_valid(placeholder) and placeholder ~= disk then
    pcall(vim.api.nvim_buf_delete, placeholder, { force = true })
  end
  vim.bo[disk].filetype = filetype
  vim.wo.winbar = proposal.now and (" %s as it is on disk"):format(shown) or (" %s does not exist yet"):format(shown)
  vim.cmd("diffthis")
  local buf = H.buffer(H.name("agent://proposal/" .. rel), proposal.proposed or "", true)
  vim.cmd("rightbelow vsplit")
  vim.api.nvim_win_set_buf(0, buf)
  vim.bo[buf].filetype = filetype
  vim.wo.winbar = " proposal · :w allows it · :q goes back"
  vim.cmd("diffthis")
  -- Diff mode turns wrapping off: on, so padding (`hello` and 5,000 spaces, then `evil()`)
  -- cannot push a change off the right edge, where scrolling down never brings it.
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(tab)) do
    vim.wo[win].wrap = true
    vim.wo[win].linebreak = false
    -- Scrolled by screen rows, so a line longer than the window is read through, never jumped.
    vim.wo[win].smoothscroll = true
  end
  local open = {
    kind = "file",
    buf = buf,
    disk = disk,
    tab = tab,
    win = vim.api.nvim_get_current_win(),
    done = false,
    original = proposal.proposed or "",
  }
  H.open = open
  H.watch(open, handlers)
end

--- Opens a command's proposal in a float: `command` is the backend's exact command line.
---@param command string
---@param handlers { on_write: fun(text: string), on_quit: fun() }
function M.command(command, handlers)
  M.close()
  local buf = H.buffer(H.name("agent://proposal/run_bash"), command, true)
  vim.bo[buf].filetype = "sh"
  local lines = vim.api.nvim_buf_line_count(buf)
  local widest = 50
  for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    widest = math.max(widest, vim.api.nvim_strwidth(line) + 2)
  end
  local columns, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight
  local width = math.max(1, math.min(widest, columns - 4, 120))
  local height = math.max(1, math.min(lines + 1, rows - 4))
  local win = vim.api.nvim_open_win(buf, true, {
    relative = "editor",
    row = math.max(0, math.floor((rows - height - 2) / 2)),
    col = math.max(0, math.floor((columns - width - 2) / 2)),
    width = width,
    height = height,
    style = "minimal",
    border = "rounded",
    title = " Edit the command ",
    title_pos = "center",
    footer = " :w or <C-s> runs it · :q goes back ",
    footer_pos = "center",
    zindex = 62,
  })
  vim.wo[win].wrap = true
  vim.wo[win].smoothscroll = true
  local open = { kind = "command", buf = buf, win = win, done = false, original = command }
  H.open = open
  for _, mode in ipairs({ "n", "i" }) do
    vim.keymap.set(mode, "<C-s>", function()
      vim.cmd.stopinsert()
      H.on_write(open, handlers)
    end, { buffer = buf, desc = "agent: run the edited command" })
  end
  H.watch(open, handlers)
end

--- True while a proposal is open.
function M.is_open()
  return H.open ~= nil
end

--- Closes what is open without calling anything (the request was answered or cancelled
--- elsewhere).
function M.close()
  local open = H.open
  if not open then
    return
  end
  open.done = true
  H.open = nil
  -- Changes the person made are kept in a buffer of their own, never thrown away unasked.
  if vim.api.nvim_buf_is_valid(open.buf) and vim.bo[open.buf].modified then
    local kept = H.buffer(H.name("agent://discarded-proposal"), H.text(open.buf), false)
    vim.bo[kept].bufhidden = "hide"
    vim.bo[kept].buflisted = true
    vim.notify(
      ("agent: request cancelled; your edited proposal is kept in %s"):format(vim.api.nvim_buf_get_name(kept)),
      vim.log.levels.WARN
    )
  end
  H.teardown(open)
end

return M
