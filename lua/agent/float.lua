--- A float in the middle of the editor, with focus: the keys' help, a side question's answer.

local M = {}

--- Opens `buf` in a rounded float of `width` x `height` (cut to the editor), centred, titled
--- `title`, over the windows below `zindex`, with 'wrap' on; returns its window.
---@param buf integer
---@param opts { width: integer, height: integer, title: string, zindex: integer }
---@return integer win
function M.centered(buf, opts)
  local width = math.max(1, math.min(opts.width, vim.o.columns - 4))
  local height = math.max(1, math.min(opts.height, vim.o.lines - 4))
  local win = vim.api.nvim_open_win(buf, true, {
    relative = "editor",
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
    width = width,
    height = height,
    style = "minimal",
    border = "rounded",
    title = opts.title,
    title_pos = "center",
    zindex = opts.zindex,
  })
  vim.wo[win].wrap = true
  return win
end

return M
