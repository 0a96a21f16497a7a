#version 450
// Strict reductions: fixed trees over invocation ids (rows.glsl). Body in rms_norm.glsl.
#extension GL_GOOGLE_include_directive : require
#include "rms_norm.glsl"
