"""Import paths of other servers, so that models written for them run on Podium unmodified."""
