#include "base/error.h"
#include "cli/commands.h"

namespace tf::cli {

int cmd_perplexity(int, char**) { fail("perplexity: not built yet"); }

}  // namespace tf::cli
