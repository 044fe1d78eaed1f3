complete --keep-order --exclusive --command druidctl --arguments "(COMPLETE=fish druidctl -- (commandline --current-process --tokenize --cut-at-cursor) (commandline --current-token))"
