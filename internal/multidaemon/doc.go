// Package multidaemon holds the test of several sandpit daemons sharing one PostgreSQL
// database (database_url): real daemons, each with its own data directory, port and
// containers, firing the same jobs exactly once while one of them is killed and restarted.
// It has no code of its own.
package multidaemon
