package operations

// BuildReport exposes buildReport to the report tests.
var BuildReport = buildReport
