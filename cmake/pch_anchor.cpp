// The source of the PCH anchor targets (cmake/MoerlBuildSpeed.cmake): a target needs one
// source to compile its precompiled header, which the libraries then reuse.
