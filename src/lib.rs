//! ccroute: distributed C/C++ compiles for bare-metal build farms.
