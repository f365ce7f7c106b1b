import { PortUnavailable } from '../../errors.js';

/**
 * 503 `{error, hint}`: a tenant's vectors do not fit in the memory budget even with every other
 * tenant evicted. Nothing is half-loaded: the tenant is dropped (a load) or the vector is not added
 * (an add), and the search can be retried once the budget is raised.
 */
export class VectorBudgetExceeded extends PortUnavailable {
  constructor(
    readonly tenantId: number,
    readonly neededBytes: number,
    readonly budgetBytes: number,
  ) {
    super(
      `the vectors of tenant ${tenantId} need ${mib(neededBytes)} MiB, more than the vector memory budget of ${mib(budgetBytes)} MiB`,
      'raise svc.retrieval.memory-budget-mb',
    );
    this.name = 'VectorBudgetExceeded';
  }
}

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
