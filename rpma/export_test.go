package rpma

// PollErr exposes pollErr to the tests.
var PollErr = pollErr
