/*
 * sensors.h -- host sensors from sysfs (thermal zones, hwmon, RAPL).
 */
#ifndef FB_AGENT_SENSORS_H
#define FB_AGENT_SENSORS_H

#include "agent/agent.h"

/* Find the sensors under root (NULL: /); fills s[FB__AGENT_MAX_SENSORS],
 * returns how many. */
int fb__sensors_discover(const char *root, fb__host_sensor *s);
/* Read them all now (energy sensors also derive power since the last). */
void fb__sensors_sample(fb__host_sensor *s, int n);

#endif
