#version 450
// Strict reductions: fixed trees over invocation ids (rows.glsl). Body in softmax.glsl.
#extension GL_GOOGLE_include_directive : require
#include "softmax.glsl"
