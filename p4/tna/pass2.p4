/* Fragment of OlafIngress (TNA): the register tables of pass 2, one per Register, keyed
 * by the op of the resubmit header: store, merge, append, pop (load into the DATA) or
 * nothing; each is pinned to its Register's stage (ingress.p4 has the plan). */

    action occupied_up() {
        md.occupied = occupied_inc.execute(0);
    }
    action occupied_down() {
        md.occupied = occupied_dec.execute(0);
    }
    @stage(0) table occupied_pass2 {
        key = { md.resub.op: exact; }
        actions = { occupied_up; occupied_down; read_occupied; }
        const entries = {
            OP_APPEND: occupied_up();
            OP_POP: occupied_down();
        }
        size = 4;
        default_action = read_occupied();
    }

    action set_index() {
        index_set.execute(resub_index_hash.get({md.resub.cluster[3:0], md.resub.block[9:0]}));
    }
    action clear_index() {
        index_clear_if_popped.execute(resub_index_hash.get({md.resub.cluster[3:0], md.resub.block[9:0]}));
    }
    @stage(0) table index_pass2 {
        key = { md.resub.op: exact; }
        actions = { set_index; clear_index; NoAction; }
        const entries = {
            OP_APPEND: set_index();
            OP_POP: clear_index();
        }
        size = 4;
        default_action = NoAction();
    }

    /* Every op of an UPDATE leaves the slots its cluster holds after the operation in
     * cluster_slots (held_c, for revision 3's feedback), a pop those of the popped slot's
     * cluster (for active_pass2). The read is pass 1's RegisterAction, at the resubmitted
     * cluster: no fourth action on this Register. */
    action count_cluster_slot() {
        md.cluster_slots = cluster_count_inc.execute(md.resub.cluster);
    }
    action uncount_cluster_slot() {
        md.cluster_slots = cluster_count_dec.execute(md.resub.cluster);
    }
    action read_held() {
        md.cluster_slots = cluster_count_read.execute(md.resub.cluster);
    }
    @stage(0) table cluster_count_pass2 {
        key = { md.resub.op: exact; }
        actions = { count_cluster_slot; uncount_cluster_slot; read_held; NoAction; }
        const entries = {
            OP_APPEND: count_cluster_slot();
            OP_POP: uncount_cluster_slot();
            OP_STORE: read_held();
            OP_MERGE: read_held();
            OP_MERGE_UP: read_held();
            OP_DROP: read_held();
        }
        size = 8;
        default_action = NoAction();
    }

    action store_seq() {
        seq_write.execute(md.resub.slot);
    }
    action load_seq() {
        hdr.olaf.seq = seq_read.execute(md.resub.slot);
    }
    @stage(0) table seq_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_seq; load_seq; NoAction; }
        const entries = {
            OP_STORE: store_seq();
            OP_APPEND: store_seq();
            OP_POP: load_seq();
        }
        size = 4;
        default_action = NoAction();
    }

    action store_agg() {
        agg_write.execute(md.resub.slot);
    }
    action merge_agg() {
        agg_merge.execute(md.resub.slot);
    }
    action load_agg() {
        hdr.olaf.agg_count = agg_read.execute(md.resub.slot);
    }
    @stage(1) table agg_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_agg; merge_agg; load_agg; NoAction; }
        const entries = {
            OP_STORE: store_agg();
            OP_APPEND: store_agg();
            OP_MERGE: merge_agg();
            OP_MERGE_UP: merge_agg();
            OP_POP: load_agg();
        }
        size = 8;
        default_action = NoAction();
    }

    action store_worker() {
        worker_write.execute(md.resub.slot);
    }
    action load_worker() {
        hdr.olaf.worker_id = worker_read.execute(md.resub.slot);
    }
    @stage(1) table worker_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_worker; load_worker; NoAction; }
        const entries = {
            OP_STORE: store_worker();
            OP_APPEND: store_worker();
            OP_POP: load_worker();
        }
        size = 4;
        default_action = NoAction();
    }

    action store_reward() {
        reward_write.execute(md.resub.slot);
    }
    action load_reward() {
        hdr.olaf.reward = reward_read.execute(md.resub.slot);
    }
    @stage(1) table reward_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_reward; load_reward; NoAction; }
        const entries = {
            OP_STORE: store_reward();
            OP_APPEND: store_reward();
            OP_MERGE_UP: store_reward();
            OP_POP: load_reward();
        }
        size = 4;
        default_action = NoAction();
    }

    action advance_read_ptr() {
        read_ptr_advance.execute(0);
    }
    @stage(1) table read_ptr_pass2 {
        key = { md.resub.op: exact; }
        actions = { advance_read_ptr; NoAction; }
        const entries = {
            OP_POP: advance_read_ptr();
        }
        size = 2;
        default_action = NoAction();
    }

    action store_slot_key() {
        slot_key_write.execute(md.resub.slot);
    }
    @stage(2) table slot_key_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_slot_key; NoAction; }
        const entries = {
            OP_STORE: store_slot_key();
            OP_APPEND: store_slot_key();
        }
        size = 2;
        default_action = NoAction();
    }

    action advance_write_ptr() {
        write_ptr_advance.execute(0);
    }
    @stage(2) table write_ptr_pass2 {
        key = { md.resub.op: exact; }
        actions = { advance_write_ptr; NoAction; }
        const entries = {
            OP_APPEND: advance_write_ptr();
        }
        size = 2;
        default_action = NoAction();
    }

    action release_lock() {
        lock_release.execute(0);
    }
    /* An invalid UPDATE's answer passes here without having taken the lock. */
    @stage(2) table lock_pass2 {
        key = { md.resub.op: exact; }
        actions = { release_lock; NoAction; }
        const entries = {
            OP_INVALID: NoAction();
        }
        size = 2;
        default_action = release_lock();
    }

    action store_model_version() {
        model_version_write.execute(md.resub.slot);
    }
    action min_model_version() {
        model_version_min.execute(md.resub.slot);
    }
    action load_model_version() {
        hdr.olaf.model_version = model_version_read.execute(md.resub.slot);
    }
    @stage(2) table model_version_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_model_version; min_model_version; load_model_version; NoAction; }
        const entries = {
            OP_STORE: store_model_version();
            OP_APPEND: store_model_version();
            OP_MERGE: min_model_version();
            OP_MERGE_UP: min_model_version();
            OP_POP: load_model_version();
        }
        size = 8;
        default_action = NoAction();
    }

    /* A cluster becomes active with its first queued slot and inactive with its last
     * (cluster_slots is the count after the append or the pop). */
    action activate_cluster() {
        hdr.olaf.active_clusters = active_inc.execute(0);
    }
    action deactivate_cluster() {
        hdr.olaf.active_clusters = active_dec.execute(0);
    }
    @stage(3) table active_pass2 {
        key = {
            md.resub.op: exact;
            md.cluster_slots: exact;
        }
        actions = { activate_cluster; deactivate_cluster; read_active; }
        const entries = {
            (OP_APPEND, 1): activate_cluster();
            (OP_POP, 0): deactivate_cluster();
        }
        size = 4;
        default_action = read_active();
    }

    action store_gen_time() {
        gen_time_write.execute(md.resub.slot);
    }
    action min_gen_time() {
        gen_time_min.execute(md.resub.slot);
    }
    action load_gen_time() {
        hdr.olaf.gen_time_us = gen_time_read.execute(md.resub.slot);
    }
    @stage(3) table gen_time_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_gen_time; min_gen_time; load_gen_time; NoAction; }
        const entries = {
            OP_STORE: store_gen_time();
            OP_APPEND: store_gen_time();
            OP_MERGE: min_gen_time();
            OP_MERGE_UP: min_gen_time();
            OP_POP: load_gen_time();
        }
        size = 8;
        default_action = NoAction();
    }

    action store_contributors() {
        contributors_write.execute(md.resub.slot);
    }
    action or_contributors() {
        contributors_or.execute(md.resub.slot);
    }
    action load_contributors() {
        hdr.olaf.contributors = contributors_read.execute(md.resub.slot);
    }
    @stage(3) table contributors_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_contributors; or_contributors; load_contributors; NoAction; }
        const entries = {
            OP_STORE: store_contributors();
            OP_APPEND: store_contributors();
            OP_MERGE: or_contributors();
            OP_MERGE_UP: or_contributors();
            OP_POP: load_contributors();
        }
        size = 8;
        default_action = NoAction();
    }
