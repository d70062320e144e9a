package postgres

import "testing"

// Every parameter that the store accepts is one that pgx or pgxpool reads
// (ParseURL refuses those that pgx would send to the server), but for
// those that name files, which pgx reads when it parses.
func TestPgxParamsKnown(t *testing.T) {
	files := map[string]bool{"passfile": true, "service": true, "servicefile": true,
		"sslrootcert": true, "sslcert": true, "sslkey": true}
	values := []string{"1", "disable", "any", "x", "3.0", "password", "simple_protocol", "postgres", "1s", "true", "h"}
	for _, name := range pgxParams {
		if files[name] {
			continue
		}
		var err error
		for _, v := range values {
			if _, err = ParseURL("postgres://h/db?" + name + "=" + v); err == nil {
				break
			}
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
