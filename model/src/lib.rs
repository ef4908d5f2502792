//! Stateright models over custodian's real state machines.
