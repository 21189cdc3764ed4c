package eventrule

// LeakFullEvery is leakFullEvery, for the external tests.
const LeakFullEvery = leakFullEvery
