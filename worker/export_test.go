package worker

// LaneOf is laneOf, for tests that place runs in approval lanes.
var LaneOf = laneOf
