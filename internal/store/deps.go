package store

// Blank imports keep the modules in go.mod until the code using them lands.
import (
	_ "github.com/pressly/goose/v3"
	_ "github.com/robfig/cron/v3"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "modernc.org/sqlite"
)
