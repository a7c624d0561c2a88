module sandpit.invalid/kube-pause

go 1.23
