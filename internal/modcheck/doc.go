// Package modcheck holds a test of what a program that imports tenure
// links: TestLibraryModules builds a fresh module that imports only the
// root package, store/sqlite and store/all and checks, with go list -m all,
// that none of the modules only the repository's tools need (plotting,
// fonts, the benchmark) reach it, nor client-go and the other modules of
// the Kubernetes store (store/kubernetes, a module of its own).
package modcheck
