package app

// insecureOptIn is the explicit cleartext opt-in (upstream's variable) that
// tests of everything but security give the servers they start: flow serve
// refuses to start without certificates otherwise.
const insecureOptIn = "ALLOW_INSECURE_GRPC=true"
