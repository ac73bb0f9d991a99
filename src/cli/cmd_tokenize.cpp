#include "base/error.h"
#include "cli/commands.h"

namespace tf::cli {

int cmd_tokenize(int, char**) { fail("tokenize: not built yet"); }

}  // namespace tf::cli
