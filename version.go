package sentinel

// This file: Version, the library's version, kept here only.

// Version is the version of this module (the sentinel package and the
// packages beside it, such as otelsentinel, which reports it as its
// OpenTelemetry instrumentation scope's version). It is kept by hand: a
// release sets it to the version of its CHANGELOG.md heading, and the
// commit after a release to the next minor version with a "-dev" suffix,
// so a build from between releases never claims to be the last one.
const Version = "0.3.0-dev"
