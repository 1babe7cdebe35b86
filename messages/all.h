// Convenience: every message struct and the codec.
#pragma once

#include "messages/admin.h"
#include "messages/codec.h"
#include "messages/control.h"
#include "messages/metrics.h"
#include "messages/sample.h"
#include "messages/shard.h"
#include "messages/weights.h"
#include "messages/work.h"
