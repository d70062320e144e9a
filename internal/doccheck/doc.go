// Package doccheck holds the tests that keep the documentation true: every
// Go identifier, test name and file a document names must exist, no
// document may carry a run log's diary, and the configuration reference
// must name every option, URL parameter, environment variable and CLI flag
// there is. It has no code of its own.
package doccheck
