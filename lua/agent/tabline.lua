--- The tab pages' labels while several conversations are open: a tab page showing one is
--- labelled with its name (`2 agent: fix the tests`), the others as Neovim labels them (the
--- current window's file). Set only while two or more conversations are open, only when
--- 'tabline' is empty (a tabline of the person's own is never replaced), and only with
--- `tabline = true` (the default); put back to empty when one is left. See
--- :help agent-conversations.

local M = {}

--- The 'tabline' value this module sets.
M.EXPR = "%!v:lua.require'agent.tabline'.render()"

--- The tab line: each tab page's number and label, clickable, the current one highlighted.
---@return string
function M.render()
  local conversations = require("agent.conversations")
  local current = vim.api.nvim_get_current_tabpage()
  local parts = {}
  for i, tab in ipairs(vim.api.nvim_list_tabpages()) do
    local conversation = conversations.in_tab(tab)
    local label
    if conversation then
      label = "agent: " .. conversations.label(conversation)
    else
      local buf = vim.api.nvim_win_get_buf(vim.api.nvim_tabpage_get_win(tab))
      local name = vim.api.nvim_buf_get_name(buf)
      label = name == "" and "[No Name]" or vim.fn.fnamemodify(name, ":t")
      if vim.bo[buf].modified then
        label = label .. " +"
      end
    end
    parts[#parts + 1] = ("%s%%%dT %d %s "):format(
      tab == current and "%#TabLineSel#" or "%#TabLine#",
      i,
      i,
      (label:gsub("%%", "%%%%"))
    )
  end
  return table.concat(parts) .. "%#TabLineFill#%T"
end

--- Sets or clears 'tabline' for how many conversations are open now, and redraws it.
function M.update()
  local several = #require("agent.conversations").all() >= 2
  if several and vim.o.tabline == "" and require("agent.config").options.tabline then
    vim.o.tabline = M.EXPR
  elseif not several and vim.o.tabline == M.EXPR then
    vim.o.tabline = ""
  end
  pcall(vim.cmd.redrawtabline)
end

return M
