"""eagerrt's core: AsyncValue, the host scheduler, worker pools, the event-loop
bridge, errors and settings. It knows nothing of ops or devices."""
