package mysql

import "database/sql"

// DB returns the store's connection pool.
func (s *Store) DB() *sql.DB { return s.db }
