#pragma once
// Startup rounds that make a backend's buffers before memory is planned.
#include "backend/backend.h"
#include "models/model.h"

namespace tf {

// Runs, on throwaway KV, the widest rounds an engine of these lanes, chunk grid, page size,
// context and round budget makes: its widest round less a row (max_round_rows - 1, in as few
// prompts as the model's window allows), and every lane's first tokens (lanes rows). A backend
// grows its scratch on first use (a GPU's routing, split-K and sampling buffers), so the footprint
// measured after these counts them.
void warm_up_rounds(Model& model, Backend& backend, int lanes, int chunk, int page_size, int context,
                    int round_tokens = 0);

}  // namespace tf
